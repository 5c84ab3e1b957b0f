"""A stored message as a ``ReceiveMessage`` answer carries it (Java proxy GrpcConverter.buildMessage), and
a receive's filter expression as a test of stored records (TAG and SQL92, as the broker's pop path filters).

Pure rules, no I/O: the consumer RPCs call them on records they read from the store.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from tidemq.filter import SqlParseError, compile_sql
from tidemq.filter.sql92 import SqlExpression
from tidemq.grpc.convert import RESERVED_PROPERTIES, SHARDING_KEY, TRACE_CONTEXT
from tidemq.grpc.proto import definition_pb2 as pb
from tidemq.grpc.status import Code, GrpcStatusError
from tidemq.record import MessageExt, Prop, tag_hash

#: Properties a consumer never sees as user properties: the system's, and what the proxy adds on the way.
HIDDEN_PROPERTIES = RESERVED_PROPERTIES | {"POP_CK", "1ST_POP_TIME", Prop.CLUSTER}


@dataclass(frozen=True, slots=True)
class Delivery:
    """What the pop state says of one handed-out message."""

    receipt_handle: str
    attempt: int
    invisible_ms: int


def _ts(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def message_type(props: dict[str, str]) -> pb.MessageType:
    if props.get(Prop.TRAN_MSG) == "true":
        return pb.TRANSACTION
    if props.get(Prop.TIMER_DELIVER_MS) or props.get(Prop.DELAY, "0") not in ("", "0"):
        return pb.DELAY
    if props.get(SHARDING_KEY):
        return pb.FIFO
    return pb.NORMAL


def to_grpc_message(msg: MessageExt, delivery: Delivery, topic: pb.Resource) -> pb.Message:
    """The message a receiver gets: its body plain (IDENTITY) with a CRC32 digest the SDKs check, user
    properties without the system's, and the delivery facts (receipt handle, attempt, queue, offset)."""
    props = msg.properties
    sp = pb.SystemProperties(
        message_id=props.get(Prop.UNIQ_KEY) or msg.offset_msg_id,
        body_digest=pb.Digest(type=pb.CRC32, checksum=format(zlib.crc32(msg.body) & 0xFFFFFFFF, "08X")),
        body_encoding=pb.IDENTITY,
        message_type=message_type(props),
        born_timestamp=_ts(msg.born_timestamp),
        born_host=msg.born_host.rsplit(":", 1)[0],
        store_timestamp=_ts(msg.store_timestamp),
        store_host=msg.store_host,
        receipt_handle=delivery.receipt_handle,
        queue_id=msg.queue_id,
        queue_offset=msg.queue_offset,
        invisible_duration=Duration(
            seconds=delivery.invisible_ms // 1000, nanos=(delivery.invisible_ms % 1000) * 1_000_000
        ),
        delivery_attempt=delivery.attempt,
    )
    if props.get(Prop.TAGS):
        sp.tag = props[Prop.TAGS]
    sp.keys.extend(props.get(Prop.KEYS, "").split())
    if props.get(SHARDING_KEY):
        sp.message_group = props[SHARDING_KEY]
    deliver_ms = props.get(Prop.TIMER_DELIVER_MS, "")
    if deliver_ms.isdigit():
        sp.delivery_timestamp.CopyFrom(_ts(int(deliver_ms)))
    if props.get(TRACE_CONTEXT):
        sp.trace_context = props[TRACE_CONTEXT]
    user = {k: v for k, v in props.items() if k not in HIDDEN_PROPERTIES}
    return pb.Message(topic=topic, user_properties=user, system_properties=sp, body=msg.body)


@dataclass(frozen=True, slots=True)
class ReceiveFilter:
    """A receive's subscription: all, a set of tags (``a || b``), or an SQL92 expression."""

    tags: frozenset[str] | None = None
    sql: SqlExpression | None = None

    @property
    def tag_codes(self) -> frozenset[int] | None:
        return None if self.tags is None else frozenset(tag_hash(t) for t in self.tags)

    @property
    def needs_properties(self) -> bool:
        return self.sql is not None or self.tags is not None

    def matches(self, props: dict[str, str]) -> bool:
        if self.sql is not None:
            return self.sql.matches(props)
        return self.tags is None or props.get(Prop.TAGS, "") in self.tags


def receive_filter(expression: pb.FilterExpression) -> ReceiveFilter:
    """FilterAPI.build: ILLEGAL_FILTER_EXPRESSION for an SQL92 expression that does not parse."""
    text = expression.expression.strip()
    if expression.type == pb.SQL:
        try:
            return ReceiveFilter(sql=compile_sql(text))
        except SqlParseError as exc:
            raise GrpcStatusError(Code.ILLEGAL_FILTER_EXPRESSION, str(exc)) from None
    if not text or text == "*":
        return ReceiveFilter()
    return ReceiveFilter(tags=frozenset(t.strip() for t in text.split("||") if t.strip()))
