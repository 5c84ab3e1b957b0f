"""A delivered message and its responses (go-nsq ``message.go``, spec 5.5).

Responses may be given from any thread (blocking handlers run in a pool): the message only decides
"first response wins" and hands the rest to its delegate, which moves it onto the event loop.
"""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tidemq.nsq.client.conn import NsqdConn


#: Makes "first response wins" hold when two threads answer the same message at once.
_RESPOND_LOCK = threading.Lock()


class MessageDelegate(Protocol):
    def on_finish(self, message: Message) -> None: ...

    def on_requeue(self, message: Message, delay: float, backoff: bool) -> None: ...

    def on_touch(self, message: Message) -> None: ...


class Message:
    """One delivery: ``id`` (16 ASCII bytes), ``body``, ``timestamp`` (ns), ``attempts``, ``nsqd_address``."""

    __slots__ = (
        "_auto_response_disabled",
        "_delegate",
        "_responded",
        "attempts",
        "body",
        "conn",
        "id",
        "nsqd_address",
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
        self.nsqd_address = conn.addr
        self._delegate = delegate
        self._responded = False
        self._auto_response_disabled = False

    def __repr__(self) -> str:
        return (
            f"Message(id={self.id!r}, attempts={self.attempts}, nsqd={self.nsqd_address}, {len(self.body)}B)"
        )

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
        if not self._claim():
            return
        self._delegate.on_finish(self)

    def requeue(self, delay: float = -1, backoff: bool = True) -> None:
        """REQ after ``delay`` seconds; -1 computes ``default_requeue_delay x attempts`` (capped).

        ``backoff=False`` is go-nsq's ``RequeueWithoutBackoff``: the failure does not slow the consumer.
        """
        if (delay < 0 and delay != -1) or not math.isfinite(delay):
            raise ValueError(f"requeue delay must be >= 0 or -1 (computed), got {delay}")
        if not self._claim():
            return
        self._delegate.on_requeue(self, delay, backoff)

    def requeue_without_backoff(self, delay: float = -1) -> None:
        self.requeue(delay, backoff=False)

    def _claim(self) -> bool:
        with _RESPOND_LOCK:
            if self._responded:
                return False
            self._responded = True
            return True

    def touch(self) -> None:
        """TOUCH: reset nsqd's in-flight timeout. Ignored once responded."""
        if self._responded:
            return
        self._delegate.on_touch(self)
