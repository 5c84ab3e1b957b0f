"""``MessageExt``: one stored record, decoded, with the names RocketMQ clients use."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field, fields

from tidemq.record.ids import offset_msg_id, unpack_host
from tidemq.record.properties import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR, Prop, decode_properties


def _joined(text: str, encoded: str) -> str:
    """Stored property text with more appended: a separator only between two texts."""
    return f"{text}{PROPERTY_SEPARATOR}{encoded}" if text else encoded


@dataclass(slots=True)
class MessageExt:
    """A decoded stored message, with the names RocketMQ clients use."""

    topic: str
    body: bytes
    queue_id: int = 0
    queue_offset: int = 0
    commit_log_offset: int = 0
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    store_timestamp: int = 0
    store_host_raw: bytes = b""
    born_host_raw: bytes = b""
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    body_crc: int = 0
    store_size: int = 0
    #: The properties, or their stored text until ``properties`` is first read: a consumer that reads only
    #: bodies skips a decode per message.
    props: dict[str, str] | str = field(default="", compare=False)
    #: Set by consumers from the queue the message was pulled from; not part of the stored record.
    broker_name: str = ""

    @property
    def properties(self) -> dict[str, str]:
        props = self.props
        if isinstance(props, str):
            props = self.props = decode_properties(props)
        return props

    @properties.setter
    def properties(self, value: dict[str, str]) -> None:
        self.props = value

    def add_properties(self, encoded: str) -> None:
        """Set the properties in ``encoded`` (``encode_properties`` text), decoded or not."""
        if isinstance(self.props, str):
            self.props = _joined(self.props, encoded)
        else:
            self.props.update(decode_properties(encoded))

    def put_property(self, key: str, value: str) -> None:
        """Set one property, leaving stored text undecoded (the push consumers stamp every message's
        consume start time, and need not decode its properties for that)."""
        props = self.props
        if isinstance(props, dict):
            props[key] = value
        else:
            self.props = _joined(props, f"{key}{NAME_VALUE_SEPARATOR}{value}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageExt):
            return NotImplemented
        return _compared(self) == _compared(other) and self.properties == other.properties

    @property
    def born_host(self) -> str:
        return unpack_host(self.born_host_raw) if self.born_host_raw else ""

    @property
    def store_host(self) -> str:
        return unpack_host(self.store_host_raw) if self.store_host_raw else ""

    @property
    def tags(self) -> str | None:
        return self.properties.get(Prop.TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(Prop.KEYS)

    @property
    def offset_msg_id(self) -> str:
        return offset_msg_id(self.store_host_raw, self.commit_log_offset)

    @property
    def msg_id(self) -> str:
        """What clients call msgId: the producer's UNIQ_KEY if set, else the offset id."""
        return self.properties.get(Prop.UNIQ_KEY) or self.offset_msg_id


#: A message's fields that equality compares directly (the properties are compared decoded).
_compared = operator.attrgetter(*(f.name for f in fields(MessageExt) if f.compare))
