"""The client-side ``MessageQueue`` value (Java ``org.apache.rocketmq.common.message.MessageQueue``).

Rebalancing depends on every client of a group sorting queues identically and on the exact
``toString()`` text (the consistent-hash strategy hashes it), so both follow Java precisely.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def java_string_key(s: str) -> bytes:
    """A sort key ordering strings like Java's ``String.compareTo``.

    Java compares UTF-16 code units; Python compares code points, which differ once a string holds a
    character above U+FFFF (its surrogates, 0xD800..0xDFFF, sort below U+E000..U+FFFF in Java).
    Big-endian UTF-16 bytes compare exactly like the code-unit sequence; ``surrogatepass`` keeps
    lone surrogates (possible in Python strings) encodable and distinct.
    """
    return s.encode("utf-16-be", "surrogatepass")


@dataclass(frozen=True, slots=True)
class MessageQueue:
    """One queue of a topic on one broker; ordered like Java (topic, brokerName, queueId)."""

    topic: str
    broker_name: str
    queue_id: int
    #: Worked out once: a queue is a dict key on every consumed message's path (offsets, process queues).
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.topic, self.broker_name, self.queue_id)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[MessageQueue], tuple[str, str, int]]:
        """Pickled by its fields: a string's hash differs from one process to the next."""
        return MessageQueue, (self.topic, self.broker_name, self.queue_id)

    def sort_key(self) -> tuple[bytes, bytes, int]:
        return java_string_key(self.topic), java_string_key(self.broker_name), self.queue_id

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, MessageQueue):
            return NotImplemented
        return self.sort_key() < other.sort_key()

    def __le__(self, other: object) -> bool:
        if not isinstance(other, MessageQueue):
            return NotImplemented
        return self.sort_key() <= other.sort_key()

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, MessageQueue):
            return NotImplemented
        return self.sort_key() > other.sort_key()

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, MessageQueue):
            return NotImplemented
        return self.sort_key() >= other.sort_key()

    def __str__(self) -> str:
        # Java's toString(); hashed by the consistent-hash allocation, so it must match byte for byte.
        return f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, queueId={self.queue_id}]"

    def to_json(self) -> dict[str, Any]:
        """The fastjson field names Java uses in bodies (lock/unlock batches, offset tables)."""
        return {"topic": self.topic, "brokerName": self.broker_name, "queueId": self.queue_id}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> MessageQueue:
        """Parse a JSON object; ``queueId`` may be a numeric string, as fastjson accepts one.

        Raises ``ValueError`` for missing or mistyped fields (bodies come from the network).
        """
        try:
            topic, broker_name, queue_id = d["topic"], d["brokerName"], d["queueId"]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a MessageQueue object: {d!r}") from exc
        if not isinstance(topic, str) or not isinstance(broker_name, str):
            raise ValueError(f"MessageQueue topic/brokerName must be strings: {d!r}")
        if isinstance(queue_id, bool) or not isinstance(queue_id, int | str):
            raise ValueError(f"MessageQueue queueId must be an integer: {d!r}")
        if isinstance(queue_id, str):
            try:
                queue_id = int(queue_id, 10)
            except ValueError as exc:
                raise ValueError(f"MessageQueue queueId must be an integer: {d!r}") from exc
        return cls(topic, broker_name, queue_id)
