"""A delivered message and its responses (go-nsq ``message.go``,
docs/protocols/nsq-client.md#message-handling).

Responses may be given from any thread (blocking handlers run in a pool): the message records that one was
given and hands it to its delegate, which moves it onto the event loop. "First response wins" is decided
there, on the loop thread alone (``_settle``), so it needs no lock: two threads answering at once both pass
``has_responded`` but only the first to reach the loop is written.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tidemq.nsq.client.conn import NsqdConn


class MessageDelegate(Protocol):
    """Called in the responding thread; writes a response on the loop only if ``message._settle()``."""

    def on_finish(self, message: Message) -> None: ...

    def on_requeue(self, message: Message, delay: float, backoff: bool) -> None: ...

    def on_touch(self, message: Message) -> None: ...


class Message:
    """One delivery: ``id`` (16 ASCII bytes), ``body``, ``timestamp`` (ns), ``attempts``, ``nsqd_address``."""

    __slots__ = (
        "_auto_response_disabled",
        "_delegate",
        "_responded",
        "_settled",
        "attempts",
        "body",
        "conn",
        "id",
        "timestamp",
    )

    def __init__(
        self,
        msg_id: bytes,
        body: bytes,
        timestamp: int,
        attempts: int,
        conn: NsqdConn,
        delegate: MessageDelegate,
    ) -> None:
        self.id = msg_id
        self.body = body
        self.timestamp = timestamp
        self.attempts = attempts
        self.conn = conn
        self._delegate = delegate
        self._responded = False
        #: Written on the loop thread only, when the delegate really sends the response.
        self._settled = False
        self._auto_response_disabled = False

    def __repr__(self) -> str:
        return (
            f"Message(id={self.id!r}, attempts={self.attempts}, nsqd={self.nsqd_address}, {len(self.body)}B)"
        )

    @property
    def nsqd_address(self) -> str:
        return self.conn.addr

    @property
    def has_responded(self) -> bool:
        return self._responded

    @property
    def is_auto_response_disabled(self) -> bool:
        return self._auto_response_disabled

    def disable_auto_response(self) -> None:
        """The handler will answer later itself (batching, async work); the consumer will not."""
        self._auto_response_disabled = True

    def finish(self) -> None:
        """FIN: processed. A no-op once any response was given."""
        if self._responded:
            return
        self._responded = True
        self._delegate.on_finish(self)

    def requeue(self, delay: float = -1, backoff: bool = True) -> None:
        """REQ after ``delay`` seconds; -1 computes ``default_requeue_delay x attempts`` (capped).

        ``backoff=False`` is go-nsq's ``RequeueWithoutBackoff``: the failure does not slow the consumer.
        """
        if (delay < 0 and delay != -1) or not math.isfinite(delay):
            raise ValueError(f"requeue delay must be >= 0 or -1 (computed), got {delay}")
        if self._responded:
            return
        self._responded = True
        self._delegate.on_requeue(self, delay, backoff)

    def requeue_without_backoff(self, delay: float = -1) -> None:
        self.requeue(delay, backoff=False)

    def _settle(self) -> bool:
        """Loop thread only: True for the one response that is written, False for any later one."""
        if self._settled:
            return False
        self._settled = True
        return True

    def touch(self) -> None:
        """TOUCH: reset nsqd's in-flight timeout. Ignored once responded."""
        if self._responded:
            return
        self._delegate.on_touch(self)
