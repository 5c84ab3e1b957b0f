"""The hand-optimised twins of the reference codec, for the hot paths: a pull answer decoded in one pass,
nsqd's lean reader, the broker's and nsqd's batch builders, a raw-properties look-up.

Each function's docstring names its reference twin (the readable code in ``codec``, ``batch`` and
``properties``) and the property test in tests/record/test_fast_twins.py that pins the two to the same
answer. Change one, and that test says whether they still agree. They bind what they use in a loop to
locals and unpack only what they need: keep it so.
"""

from __future__ import annotations

import struct
import zlib
from functools import lru_cache

from tidemq.record.batch import BATCH_ITEM_HEAD, ITEM_OVERHEAD, StoredBatch
from tidemq.record.codec import decode_record
from tidemq.record.layout import (
    HEAD_V4,
    HEAD_V4_BODY_FIELDS,
    HOSTS_V6,
    MAGIC_MESSAGE,
    MAX_PROPERTIES,
    POS_SYSFLAG,
    PROPERTIES_LENGTH,
    PROPERTIES_LENGTH_SIZE,
    TOPIC_LENGTH_SIZE,
    MessageDecodeError,
    SysFlag,
    body_length_pos,
    host_flags,
    properties_field,
    record_head,
    topic_field,
)
from tidemq.record.message import MessageExt
from tidemq.record.properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    Prop,
    encode_properties,
    key_prefix,
    tag_hash,
)

_TAGS = key_prefix(Prop.TAGS)
_KEYS = key_prefix(Prop.KEYS)
_UNIQ_KEY = key_prefix(Prop.UNIQ_KEY)
_DELAY = key_prefix(Prop.DELAY)
_SEPARATOR = PROPERTY_SEPARATOR.encode()
_NAME_VALUE = NAME_VALUE_SEPARATOR.encode()
_SEPARATOR_CODE = ord(PROPERTY_SEPARATOR)


def decode_records(buf: bytes | bytearray | memoryview, *, decompress: bool = True) -> list[MessageExt]:
    """Every record of a pull answer (records back to back) in one pass.

    Reference twin: ``list(codec.iter_records(buf, decompress=decompress))``, pinned by
    ``test_decode_records_is_iter_records``. The common record (IPv4 hosts, nothing to inflate, well
    formed) is decoded inline here, and its properties are left as text until read; any other record
    goes through ``decode_record``, which also names what is wrong with a malformed one.
    """
    data = buf if isinstance(buf, bytes) else bytes(buf)
    out: list[MessageExt] = []
    append = out.append
    unpack, fixed_size = HEAD_V4.unpack_from, HEAD_V4.size
    unusual = HOSTS_V6 | (SysFlag.COMPRESSED if decompress else 0)
    topic_len_size, props_len_size = TOPIC_LENGTH_SIZE, PROPERTIES_LENGTH_SIZE
    tail_lengths = topic_len_size + props_len_size
    topics: dict[bytes, str] = {}
    pos, size = 0, len(data)
    while pos < size:
        try:
            (total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts,
             born_raw, store_ts, store_raw, reconsume, prepared, body_len) = unpack(data, pos)  # fmt: skip
        except struct.error:
            total = magic = body_len = sys_flag = 0
        end = pos + total
        body_at = pos + fixed_size
        topic_at = body_at + body_len
        if (  # the plain record, whose topic and lengths agree with its size (as in record_bodies)
            sys_flag & unusual
            or magic != MAGIC_MESSAGE
            or not body_at <= topic_at < end <= size
            or not data[topic_at]
            or (props_at := topic_at + tail_lengths + data[topic_at]) > end
            or int.from_bytes(data[props_at - props_len_size : props_at]) != end - props_at
        ):
            msg = decode_record(data, pos, decompress=decompress)  # the unusual one, or the error naming it
            append(msg)
            pos += msg.store_size
            continue
        raw_topic = data[topic_at + topic_len_size : props_at - props_len_size]
        try:
            topic = topics.get(raw_topic) or topics.setdefault(raw_topic, raw_topic.decode())
            props = data[props_at:end].decode() if props_at < end else ""
        except UnicodeDecodeError as exc:
            raise MessageDecodeError(f"malformed record at {pos}: {exc}") from None
        body = data[body_at:topic_at]
        append(
            MessageExt(
                topic, body, queue_id, queue_offset, phys, flag, sys_flag, born_ts, store_ts, store_raw,
                born_raw, reconsume, prepared, crc, total, props,
            )
        )  # fmt: skip
        pos = end
    return out


def record_bodies(buf: bytes | bytearray | memoryview) -> list[tuple[int, int, bytes, bytes]]:
    """(queue offset, store timestamp, body, encoded properties) of every record, in one pass.

    Reference twin: ``(m.queue_offset, m.store_timestamp, m.body, encode_properties(m.properties))`` for
    each ``m`` of ``codec.iter_records(buf, decompress=False)``, pinned by
    ``test_record_bodies_is_iter_records``. For a reader that needs nothing else (nsqd's channels): no
    ``MessageExt`` and no properties dict per record, and only the six fields it needs unpacked; what is
    not a plain record goes through ``decode_record`` as in ``decode_records``, but a plain record's topic
    and properties stay undecoded, so it does not refuse ones that are not UTF-8.
    """
    data = buf if isinstance(buf, bytes) else bytes(buf)
    out: list[tuple[int, int, bytes, bytes]] = []
    append = out.append
    unpack, fixed_size = HEAD_V4_BODY_FIELDS.unpack_from, HEAD_V4_BODY_FIELDS.size
    props_len_size = PROPERTIES_LENGTH_SIZE
    tail_lengths = TOPIC_LENGTH_SIZE + props_len_size
    pos, size = 0, len(data)
    while pos < size:
        try:
            total, magic, queue_offset, sys_flag, store_ts, body_len = unpack(data, pos)
        except struct.error:
            total = magic = body_len = sys_flag = 0
        end = pos + total
        body_at = pos + fixed_size
        topic_at = body_at + body_len
        if (
            sys_flag & HOSTS_V6
            or magic != MAGIC_MESSAGE
            or not body_at <= topic_at < end <= size
            or not data[topic_at]
            or (props_at := topic_at + tail_lengths + data[topic_at]) > end
            or int.from_bytes(data[props_at - props_len_size : props_at]) != end - props_at
        ):
            msg = decode_record(data, pos, decompress=False)
            append(
                (msg.queue_offset, msg.store_timestamp, msg.body, encode_properties(msg.properties).encode())
            )
            pos += msg.store_size
            continue
        append((queue_offset, store_ts, data[body_at:topic_at], data[props_at:end]))
        pos = end
    return out


def property_value(props: bytes, key: bytes) -> bytes | None:
    """The value of ``key`` (a ``key_prefix``) in encoded properties; the last one wins.

    Reference twin: ``properties.decode_properties(props.decode()).get(key)``, encoded, for properties
    ``encode_properties`` wrote; pinned by ``test_property_value_is_decode_properties``.
    """
    i = props.rfind(key)
    while i >= 0:
        if i == 0 or props[i - 1] == _SEPARATOR_CODE:
            start = i + len(key)
            end = props.find(_SEPARATOR, start)
            if end < 0:
                end = len(props)
            if end > start:  # a pair with an empty value is dropped, as decoding drops it
                return props[start:end]
        i = props.rfind(key, 0, i)
    return None


@lru_cache(maxsize=1024)
def _tags_code(tags: bytes) -> int:
    return tag_hash(tags.decode(errors="replace"))


def _scan(props: bytes) -> tuple[int, list[bytes]]:
    """(tags code, keys to index) of one record's properties; refuses a delay level."""
    if _DELAY in props and property_value(props, _DELAY):
        raise MessageDecodeError("batch messages cannot carry a delay level")
    tags = property_value(props, _TAGS) if _TAGS in props else None
    keys: list[bytes] = []
    if _KEYS in props:
        keys = (property_value(props, _KEYS) or b"").split()
    uniq = property_value(props, _UNIQ_KEY)
    if uniq:
        keys.append(uniq)
    return (_tags_code(tags) if tags else 0), keys


def build_stored_batch(
    body: bytes,
    *,
    topic: str,
    queue_id: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    extra_properties: str,
    max_body: int,
) -> StoredBatch:
    """Stored records for every message of a batch body, each with ``extra_properties`` appended.

    Reference twin: ``codec.encode_record`` for each item of ``batch.decode_batch(body)``, its properties
    joined with ``extra_properties``, its tags code ``tag_hash`` of its TAGS and its keys KEYS split then
    UNIQ_KEY; pinned by ``test_build_stored_batch_is_encode_record_per_item``.

    ``extra_properties`` are the batch's own properties and the broker's (cluster), appended to each
    message's as Java's batch encoder does. One pass over the body, one precompiled ``struct`` per
    record, no per-message dict: the properties are scanned as bytes for the few keys the store needs.
    Raises MessageDecodeError on a malformed body.
    """
    view = memoryview(body)
    topic_part = topic_field(topic)
    extra = extra_properties.encode()
    joined_extra = _SEPARATOR + extra
    separator_code = _SEPARATOR_CODE
    sys_flag = host_flags(sys_flag & ~SysFlag.COMPRESSED, born_host, store_host)
    head = record_head(len(born_host), len(store_host))
    pack_head, pack_len, crc32 = head.pack, PROPERTIES_LENGTH.pack, zlib.crc32
    unpack_item, unpack_len = BATCH_ITEM_HEAD.unpack_from, PROPERTIES_LENGTH.unpack_from
    item_head, item_overhead, len_size = BATCH_ITEM_HEAD.size, ITEM_OVERHEAD, PROPERTIES_LENGTH_SIZE
    fixed = head.size + len(topic_part) + len_size
    tags_key, keys_key, delay_key, uniq_key = _TAGS, _KEYS, _DELAY, _UNIQ_KEY
    uniq_size, name_value, separator = len(_UNIQ_KEY), _NAME_VALUE, _SEPARATOR
    parts: list[bytes | memoryview] = []
    append = parts.append
    sizes: list[int] = []
    tags_codes: list[int] = []
    keys: list[list[bytes]] = []
    pos, end = 0, len(body)
    while pos < end:
        if pos + item_overhead > end:
            raise MessageDecodeError(f"batch record at {pos} is truncated")
        total, _magic, _crc, flag, body_len = unpack_item(view, pos)
        props_at = pos + item_overhead + body_len
        props_end = pos + total
        if total < item_overhead or props_end > end or body_len < 0 or props_at > props_end:
            raise MessageDecodeError(f"batch record at {pos} has inconsistent sizes")
        if body_len > max_body:
            raise MessageDecodeError(f"message body size {body_len} exceeds the maximum {max_body}")
        (props_len,) = unpack_len(view, props_at - len_size)
        if props_at + props_len != props_end:
            raise MessageDecodeError(f"batch record at {pos} has a bad properties length")
        props = body[props_at:props_end]
        # tidemq's producer and the Spark sink batch a plain message with its unique id alone: one name,
        # so no tags, keys or delay. Two short scans tell, where the three look-ups below cost about
        # three times as much (Java's items carry WAIT too, and take the look-ups).
        if props.startswith(uniq_key) and props.find(name_value, uniq_size) < 0:
            value_end = props.find(separator, uniq_size)
            alone = props[uniq_size : value_end if value_end >= 0 else None]
            tags_code, msg_keys = 0, ([alone] if alone else [])
        elif tags_key in props or keys_key in props or delay_key in props:
            tags_code, msg_keys = _scan(props)
        else:  # what ``_scan`` would find in such properties, without its three look-ups
            tags_code = 0
            uniq = property_value(props, uniq_key)
            msg_keys = [uniq] if uniq else []
        msg_body = view[pos + item_head : props_at - len_size]
        if extra:
            props = props + joined_extra if props_len and props[-1] != separator_code else props + extra
        if len(props) > MAX_PROPERTIES:
            raise MessageDecodeError(f"properties are {len(props)} bytes, over the {MAX_PROPERTIES} limit")
        size = fixed + body_len + len(props)
        append(
            pack_head(
                size, MAGIC_MESSAGE, crc32(msg_body) & 0x7FFFFFFF, queue_id, flag, 0, 0, sys_flag,
                born_timestamp, born_host, store_timestamp, store_host, 0, 0, body_len,
            )
        )  # fmt: skip
        append(msg_body)
        append(topic_part)
        append(pack_len(len(props)))
        append(props)
        sizes.append(size)
        tags_codes.append(tags_code)
        keys.append(msg_keys)
        pos = props_end
    return StoredBatch(bytearray().join(parts), sizes, tags_codes, keys)


@lru_cache(maxsize=1024)
def _uniform_layout(topic: str, born_host: bytes, store_host: bytes) -> tuple[bytes, int, struct.Struct]:
    """What the records of a uniform batch share apart from properties and time: the topic field, the sys
    flag and the head. nsqd stores each PUB on its own, to a few topics, so this is worked out once."""
    head = record_head(len(born_host), len(store_host))
    return topic_field(topic), host_flags(0, born_host, store_host), head


def build_uniform_batch(
    bodies: list[bytes],
    *,
    topic: str,
    queue_id: int,
    properties: str,
    timestamp: int,
    born_host: bytes,
    store_host: bytes,
) -> StoredBatch:
    """Stored records for bodies that share everything else (topic, queue, properties, time): how nsqd
    stores a PUB or an MPUB.

    Reference twin: ``codec.encode_record`` for each body, with ``timestamp`` as born and store
    timestamp; pinned by ``test_build_uniform_batch_is_encode_record_per_body``. One ``struct`` pack per
    record; the tail after the body is built once.
    """
    topic_part, sys_flag, head = _uniform_layout(topic, born_host, store_host)
    tail = topic_part + properties_field(properties.encode())
    fixed = head.size + len(tail)
    pack, crc32 = head.pack, zlib.crc32

    def head_for(body: bytes) -> bytes:
        return pack(
            fixed + len(body), MAGIC_MESSAGE, crc32(body) & 0x7FFFFFFF, queue_id, 0, 0, 0, sys_flag,
            timestamp, born_host, timestamp, store_host, 0, 0, len(body),
        )  # fmt: skip

    no_keys: list[bytes] = []  # never appended to: shared by every record
    if len(bodies) == 1:  # one PUB: no list of parts to join
        body = bodies[0]
        data = bytearray(head_for(body))
        data += body
        data += tail
        return StoredBatch(data, [len(data)], [0], [no_keys])
    parts: list[bytes] = []
    append = parts.append
    for body in bodies:
        append(head_for(body))
        append(body)
        append(tail)
    sizes = [fixed + len(body) for body in bodies]
    return StoredBatch(bytearray().join(parts), sizes, [0] * len(bodies), [no_keys] * len(bodies))


def record_properties(record: bytes | bytearray | memoryview) -> bytes:
    """The encoded properties of one stored record, found by lengths alone: the pull path's property
    filters read them without decoding the body or the other fields.

    Reference twin: ``encode_properties(decode_record(record).properties)``, for properties
    ``encode_properties`` wrote; pinned by ``test_record_properties_is_decode_record``.
    """
    sys_flag = int.from_bytes(record[POS_SYSFLAG : POS_SYSFLAG + 4], signed=True)
    at = body_length_pos(sys_flag)
    topic_at = at + 4 + int.from_bytes(record[at : at + 4], signed=True)
    props_len_at = topic_at + TOPIC_LENGTH_SIZE + record[topic_at]
    props_at = props_len_at + PROPERTIES_LENGTH_SIZE
    return bytes(record[props_at : props_at + int.from_bytes(record[props_len_at:props_at])])
