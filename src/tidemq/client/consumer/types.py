"""Consumer vocabulary: message models, where to start, listener results and contexts
(docs/protocols/rocketmq-consumption.md)."""

from __future__ import annotations

import asyncio
import enum
import inspect
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, cast

from tidemq.client.message_queue import MessageQueue
from tidemq.filter import SQL92, TAG, compile_sql
from tidemq.record import MessageExt, tag_hash


class MessageModel(enum.Enum):
    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class ConsumeFromWhere(enum.Enum):
    LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class ConsumeStatus(enum.Enum):
    """What a listener answers for a batch.

    Java has two enums; here one holds both spellings and both consume services read them alike, so a
    listener written for one service works in the other:

    * success: ``CONSUME_SUCCESS`` (concurrent spelling) or ``SUCCESS`` (orderly spelling);
    * try later: ``RECONSUME_LATER`` or ``SUSPEND_CURRENT_QUEUE_A_MOMENT``; an exception or None too;
    * ``COMMIT`` / ``ROLLBACK``: orderly listeners that set ``context.auto_commit = False`` (Java's
      ConsumeOrderlyStatus). With auto-commit on, both count as success, as in Java, with a warning; a
      concurrent listener's ``COMMIT`` is a success and its ``ROLLBACK`` a try-later.

    Anything else a listener returns is logged as a mistake and counts as try-later.
    """

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"
    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"

    @property
    def ok(self) -> bool:
        """Either spelling of success (COMMIT and ROLLBACK are neither: see the orderly service)."""
        return self in SUCCESS_STATUSES


#: Both spellings of success.
SUCCESS_STATUSES = frozenset({ConsumeStatus.CONSUME_SUCCESS, ConsumeStatus.SUCCESS})

#: ``ack_index`` meaning "every message of the batch" (Java's default, Integer.MAX_VALUE).
ACK_ALL = 2**31 - 1


@dataclass(slots=True)
class ConsumeContext:
    """Handed to the listener with each batch; the listener may change the fields below to steer what
    happens to the batch (Java's ConsumeConcurrentlyContext and ConsumeOrderlyContext in one)."""

    message_queue: MessageQueue
    #: Concurrent: the delay level the failed messages are sent back with (0: the broker decides).
    delay_level_when_next_consume: int = 0
    #: Concurrent: on success, the index of the last message consumed; those after it are sent back for
    #: a retry (clustering) or dropped with a warning (broadcasting). The default covers the whole batch.
    ack_index: int = ACK_ALL
    #: Orderly: how long to wait before consuming the queue again after a try-later answer (ms).
    suspend_current_queue_time_ms: int = 1000
    #: Orderly: True commits each successful batch. False leaves batches uncommitted until the listener
    #: answers COMMIT (commit everything consumed so far) or ROLLBACK (consume it all again).
    auto_commit: bool = True


Listener = Callable[
    [list[MessageExt], ConsumeContext], "ConsumeStatus | Awaitable[ConsumeStatus | None] | None"
]
ConsumeHook = Callable[
    [list[MessageExt], ConsumeContext, "ConsumeStatus | None", "BaseException | None"], None
]


#: The listener as the services call it: whatever it answered, awaited, not yet checked.
ListenerCall = Callable[[list[MessageExt], ConsumeContext], Awaitable[object]]


def listener_call(listener: Listener, executor: Executor) -> ListenerCall:
    """How ``listener`` is run, decided once: a coroutine function on the loop, a plain function on the
    consume pool (where it may still hand back an awaitable)."""
    if inspect.iscoroutinefunction(listener):
        return cast(ListenerCall, listener)  # awaited straight on the loop: no wrapper per batch

    async def on_pool(msgs: list[MessageExt], ctx: ConsumeContext) -> object:
        result = await asyncio.get_running_loop().run_in_executor(executor, listener, msgs, ctx)
        if inspect.isawaitable(result):
            result = await result
        return result

    return on_pool


@dataclass(frozen=True, slots=True)
class MessageSelector:
    """How a subscription selects messages (Java's MessageSelector): a tag expression (``*``, ``a || b``)
    or an SQL92 expression over the message's properties, which the broker evaluates
    (docs/protocols/rocketmq-consumption.md#sql92-filters)."""

    expression_type: str
    expression: str

    @classmethod
    def tag(cls, expression: str | None = "*") -> MessageSelector:
        return cls(TAG, expression or "*")

    @classmethod
    def sql(cls, expression: str) -> MessageSelector:
        """An SQL92 selector; a malformed expression raises SqlParseError (a ValueError) here, naming the
        problem and its column, rather than at the broker."""
        compile_sql(expression)
        return cls(SQL92, expression)


@dataclass(slots=True)
class Subscription:
    """A topic subscription with a tag expression (``*`` or ``a || b``) or an SQL92 one, as sent in
    heartbeats."""

    topic: str
    expression: str
    tags: list[str]
    codes: list[int]
    version: int
    expression_type: str = TAG

    @classmethod
    def parse(cls, topic: str, expression: str | MessageSelector | None) -> Subscription:
        """A plain string is a tag expression, as in Java's ``subscribe(topic, subExpression)``."""
        if isinstance(expression, MessageSelector):
            if expression.expression_type == SQL92:
                compile_sql(expression.expression)
                return cls(topic, expression.expression, [], [], time_ms(), SQL92)
            expression = expression.expression
        expr = (expression or "").strip() or "*"
        tags = [] if expr == "*" else [t.strip() for t in expr.split("||") if t.strip()]
        if expr != "*" and not tags:
            raise ValueError(f"tag expression {expression!r} names no tag")
        return cls(topic, expr, tags, [tag_hash(t) for t in tags], time_ms())

    def to_json(self, topic: str) -> dict[str, Any]:
        return {
            "classFilterMode": False,
            "topic": topic,
            "subString": self.expression,
            "tagsSet": self.tags,
            "codeSet": self.codes,
            "subVersion": self.version,
            "expressionType": self.expression_type,
        }


def time_ms() -> int:
    return int(time.time() * 1000)
