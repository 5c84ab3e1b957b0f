"""Messages as producers build them, and what a send returns."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

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

    def wire_properties(self) -> dict[str, str]:
        props = dict(self.properties)
        if self.tags:
            props[Prop.TAGS] = self.tags
        if self.keys:
            props[Prop.KEYS] = self.keys if isinstance(self.keys, str) else " ".join(self.keys)
        if self.delay_level > 0:
            props[Prop.DELAY] = str(self.delay_level)
        props.setdefault(Prop.WAIT, "true")
        return props


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
