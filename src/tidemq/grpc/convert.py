"""A gRPC ``Message`` as the stored message a remoting consumer reads (Java proxy SendMessageActivity's
``buildMessageProperty``), the checks a send passes first, and the queue a FIFO message group maps to.

Pure rules, no I/O: the service calls them and stores what they return.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from google.protobuf.timestamp_pb2 import Timestamp

from tidemq.grpc.proto import definition_pb2 as pb
from tidemq.grpc.status import Code, GrpcStatusError
from tidemq.record import Prop

#: MessageConst.KEY_SEPARATOR: how a message's keys are joined in its KEYS property.
KEY_SEPARATOR = " "
#: Properties the proxy sets from system properties and never passes through as user properties.
SHARDING_KEY = "__SHARDINGKEY"
TRACE_CONTEXT = "TRACE_CONTEXT"
CHECK_IMMUNITY_TIME = "CHECK_IMMUNITY_TIME_IN_SECONDS"
#: Property names a user property may not take (Java MessageConst.STRING_HASH_SET, the ones that matter).
RESERVED_PROPERTIES = frozenset(
    {str(v) for k, v in vars(Prop).items() if k.isupper() and isinstance(v, str)}
    | {SHARDING_KEY, TRACE_CONTEXT, CHECK_IMMUNITY_TIME, "INSTANCE_ID", "BORN_HOST", "TRANSFER_FLAG"}
)
MAX_MESSAGE_GROUP_LENGTH = 64
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@dataclass(slots=True)
class StoredShape:
    """What a gRPC message becomes: its properties, sys flag, birth time and kind."""

    properties: dict[str, str]
    born_timestamp: int
    message_type: int
    message_group: str


def check_tag(tag: str) -> None:
    """GrpcValidator.validateTag: empty is no tag; blank, ``|`` or control characters are refused."""
    if not tag:
        return
    if not tag.strip():
        raise GrpcStatusError(Code.ILLEGAL_MESSAGE_TAG, "tag cannot be the char sequence of whitespace")
    if "|" in tag:
        raise GrpcStatusError(Code.ILLEGAL_MESSAGE_TAG, "tag cannot contain '|'")
    if _CONTROL.search(tag):
        raise GrpcStatusError(Code.ILLEGAL_MESSAGE_TAG, "tag cannot contain control character")


def check_message(msg: pb.Message, max_body: int) -> None:
    """Refuse what the proxy refuses before storing: an empty or oversize body, no message id, a bad
    tag, key, message group or a user property that takes a system name."""
    sp = msg.system_properties
    if not msg.body:
        raise GrpcStatusError(Code.MESSAGE_BODY_EMPTY, "message body cannot be empty")
    if len(msg.body) > max_body:
        raise GrpcStatusError(
            Code.MESSAGE_BODY_TOO_LARGE,
            f"message body cannot exceed the max {max_body}",  # the proxy's wording
        )
    if not sp.message_id:
        raise GrpcStatusError(Code.ILLEGAL_MESSAGE_ID, "message id is empty")
    check_tag(sp.tag)
    for key in sp.keys:
        if not key.strip() or _CONTROL.search(key):
            raise GrpcStatusError(
                Code.ILLEGAL_MESSAGE_KEY, f"message key {key!r} is blank or has a control char"
            )
    group = sp.message_group
    if group and (len(group) > MAX_MESSAGE_GROUP_LENGTH or _CONTROL.search(group)):
        raise GrpcStatusError(
            Code.ILLEGAL_MESSAGE_GROUP,
            f"message group must be at most {MAX_MESSAGE_GROUP_LENGTH} characters without control chars",
        )
    for key in msg.user_properties:
        if key in RESERVED_PROPERTIES:
            raise GrpcStatusError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {key}")


def to_millis(ts: Timestamp) -> int:
    return int(ts.seconds) * 1000 + int(ts.nanos) // 1_000_000


def stored_shape(msg: pb.Message, producer_group: str, now_ms: int | None = None) -> StoredShape:
    """The stored properties of a checked gRPC message: user properties, TAGS, KEYS, UNIQ_KEY (the
    client's message id), TIMER_DELIVER_MS for a delivery time, the transaction flags, RECONSUME_TIME,
    PGROUP (the proxy uses the topic as producer group), the message group as the sharding key."""
    sp = msg.system_properties
    props = dict(msg.user_properties)
    if sp.tag:
        props[Prop.TAGS] = sp.tag
    if sp.keys:
        props[Prop.KEYS] = KEY_SEPARATOR.join(sp.keys)
    props[Prop.UNIQ_KEY] = sp.message_id
    if sp.message_type == pb.TRANSACTION:
        props[Prop.TRAN_MSG] = "true"
        props[CHECK_IMMUNITY_TIME] = str(sp.orphaned_transaction_recovery_duration.seconds)
    if sp.HasField("delivery_timestamp"):
        props[Prop.TIMER_DELIVER_MS] = str(to_millis(sp.delivery_timestamp))
    props[Prop.RECONSUME_TIME] = str(sp.delivery_attempt)
    props[Prop.PGROUP] = producer_group
    if sp.message_group:
        props[SHARDING_KEY] = sp.message_group
    if sp.trace_context:
        props[TRACE_CONTEXT] = sp.trace_context
    born = to_millis(sp.born_timestamp) if sp.HasField("born_timestamp") else 0
    if born <= 0:
        born = now_ms if now_ms is not None else int(time.time() * 1000)
    return StoredShape(props, born, sp.message_type, sp.message_group)


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def consistent_hash(key: int, buckets: int) -> int:
    """Guava ``Hashing.consistentHash(long, int)``: the proxy's message group → write queue choice, so a
    group lands on the queue a Java proxy would pick."""
    state = key & 0xFFFFFFFFFFFFFFFF
    candidate = 0
    while True:
        state = (2862933555777941757 * state + 1) & 0xFFFFFFFFFFFFFFFF
        next_ = int((candidate + 1) / (((state >> 33) + 1) / 2147483648.0))
        if 0 <= next_ < buckets:
            candidate = next_
        else:
            return candidate


def queue_for_group(message_group: str, write_queues: int) -> int:
    """The write queue a message group's messages all go to (one queue per group keeps them in order)."""
    return consistent_hash(java_string_hash(message_group), write_queues)
