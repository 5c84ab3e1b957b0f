"""Consumer vocabulary: message models, where to start, listener results and contexts (spec 5.4-5.8)."""

from __future__ import annotations

import asyncio
import enum
import inspect
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from tidemq.client.message_queue import MessageQueue
from tidemq.remoting.message import MessageExt, tag_hash


class MessageModel(enum.Enum):
    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class ConsumeFromWhere(enum.Enum):
    LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class ConsumeStatus(enum.Enum):
    """Concurrent listeners answer CONSUME_SUCCESS or RECONSUME_LATER; orderly ones SUCCESS or
    SUSPEND_CURRENT_QUEUE_A_MOMENT. An exception or None counts as the failure answer."""

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"
    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"

    @property
    def ok(self) -> bool:
        return self in (ConsumeStatus.CONSUME_SUCCESS, ConsumeStatus.SUCCESS)


@dataclass(slots=True)
class ConsumeContext:
    message_queue: MessageQueue
    #: Concurrent: the delay level the failed messages are sent back with (0: the broker decides).
    delay_level_when_next_consume: int = 0
    #: Orderly: how long to wait before consuming the queue again after SUSPEND (ms).
    suspend_current_queue_time_ms: int = 1000
    #: Orderly: False to commit offsets yourself with ``ack_index``-style control (kept for API parity).
    auto_commit: bool = True


Listener = Callable[
    [list[MessageExt], ConsumeContext], "ConsumeStatus | Awaitable[ConsumeStatus | None] | None"
]
ConsumeHook = Callable[
    [list[MessageExt], ConsumeContext, "ConsumeStatus | None", "BaseException | None"], None
]


ListenerCall = Callable[[list[MessageExt], ConsumeContext], Awaitable[ConsumeStatus | None]]


def listener_call(listener: Listener, executor: Executor) -> ListenerCall:
    """How ``listener`` is run, decided once: a coroutine function on the loop, a plain function on the
    consume pool (where it may still hand back an awaitable)."""
    if inspect.iscoroutinefunction(listener):

        async def on_loop(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus | None:
            return _status(await listener(msgs, ctx))

        return on_loop

    async def on_pool(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus | None:
        result = await asyncio.get_running_loop().run_in_executor(executor, listener, msgs, ctx)
        if inspect.isawaitable(result):
            result = await result
        return _status(result)

    return on_pool


def _status(result: object) -> ConsumeStatus | None:
    return result if isinstance(result, ConsumeStatus) else None


@dataclass(slots=True)
class Subscription:
    """A topic subscription with a tag expression (``*`` or ``a || b``), as sent in heartbeats."""

    topic: str
    expression: str
    tags: list[str]
    codes: list[int]
    version: int

    @classmethod
    def parse(cls, topic: str, expression: str | None) -> Subscription:
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
            "expressionType": "TAG",
        }


def time_ms() -> int:
    return int(time.time() * 1000)
