"""Receipt handles of pop-style consumption: the string a receiver gets with each message it pops.

A client treats the handle as opaque and sends it back to ack the message or change its invisible
time. Like Apache RocketMQ's ``ReceiptHandle`` it is space-separated numbers a server can read without
any memory of having issued it, so a handle survives a restart: the batch's first offset, the retrieve
time and the invisible time (so its expiry is known from the handle alone, as the proxy checks it), the
lease serial (which of the message's deliveries this handle belongs to: a newer delivery or an
invisible-time change issues a new serial and makes older handles stale), the queue, the offset and the
topic. The group is not in it: the request names the group, as in RocketMQ.
"""

from __future__ import annotations

from dataclasses import dataclass

SEPARATOR = " "
_FIELDS = 7


class InvalidReceiptHandle(ValueError):
    """The handle is not one this store issues (garbled or forged)."""


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    start_offset: int
    retrieve_time: int
    invisible_time: int
    serial: int
    queue_id: int
    offset: int
    topic: str

    @property
    def next_visible_time(self) -> int:
        return self.retrieve_time + self.invisible_time

    def is_expired(self, now_ms: int) -> bool:
        """Past its invisible time the message may already be with another receiver (proxy rule)."""
        return self.next_visible_time <= now_ms

    def encode(self) -> str:
        return SEPARATOR.join(
            str(v)
            for v in (
                self.start_offset,
                self.retrieve_time,
                self.invisible_time,
                self.serial,
                self.queue_id,
                self.offset,
                self.topic,
            )
        )

    @classmethod
    def decode(cls, text: str) -> ReceiptHandle:
        parts = text.split(SEPARATOR)
        if len(parts) != _FIELDS or not parts[-1]:
            raise InvalidReceiptHandle(f"receipt handle has {len(parts)} fields, expected {_FIELDS}")
        try:
            numbers = [int(p) for p in parts[:-1]]
        except ValueError:
            raise InvalidReceiptHandle("receipt handle has a field that is not a number") from None
        if any(n < 0 for n in numbers):
            raise InvalidReceiptHandle("receipt handle has a negative field")
        start, retrieve, invisible, serial, queue_id, offset = numbers
        return cls(start, retrieve, invisible, serial, queue_id, offset, parts[-1])
