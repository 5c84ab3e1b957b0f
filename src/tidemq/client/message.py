"""Messages as producers build them, and what a send returns."""

from __future__ import annotations

import enum
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tidemq.client.message_queue import MessageQueue
from tidemq.record import Prop


@dataclass(slots=True)
class Message:
    """A message to send. ``keys`` are indexed by the broker for lookups; ``tags`` drive filtering."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | Sequence[str] | None = None
    properties: dict[str, str] = field(default_factory=dict)
    delay_level: int = 0
    flag: int = 0
    #: A timer message (RocketMQ 5.x): deliver at this time (an aware or local datetime, or epoch ms) ...
    deliver_at: datetime | int | None = None
    #: ... or this long after the send. Either sets TIMER_DELIVER_MS, computed on the producer's clock.
    delay: timedelta | None = None

    def wire_properties(self) -> dict[str, str]:
        props = dict(self.properties)
        if self.tags:
            props[Prop.TAGS] = self.tags
        if self.keys:
            props[Prop.KEYS] = self.keys if isinstance(self.keys, str) else " ".join(self.keys)
        if self.delay_level > 0:
            props[Prop.DELAY] = str(self.delay_level)
        due = deliver_time_ms(self.deliver_at, self.delay)
        if due is not None:
            props[Prop.TIMER_DELIVER_MS] = str(due)
        props.setdefault(Prop.WAIT, "true")
        return props


def deliver_time_ms(deliver_at: datetime | int | None, delay: timedelta | None) -> int | None:
    """TIMER_DELIVER_MS for ``deliver_at`` (epoch ms, or a datetime: naive ones are local time) or a
    ``delay`` from now; None for neither. Both at once is an error: which one was meant is unclear."""
    if deliver_at is not None and delay is not None:
        raise ValueError("give deliver_at or delay, not both")
    if delay is not None:
        return int(time.time() * 1000) + int(delay / timedelta(milliseconds=1))
    if isinstance(deliver_at, datetime):
        return int(deliver_at.timestamp() * 1000)
    if isinstance(deliver_at, int) and not isinstance(deliver_at, bool):
        return deliver_at
    if deliver_at is not None:
        raise TypeError(
            f"deliver_at must be a datetime or epoch milliseconds, not {type(deliver_at).__name__}"
        )
    return None


class SendStatus(enum.Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass(slots=True)
class SendResult:
    status: SendStatus
    msg_id: str
    offset_msg_id: str
    message_queue: MessageQueue
    queue_offset: int
