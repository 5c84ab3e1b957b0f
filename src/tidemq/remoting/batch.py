"""Batch messages (docs/protocols/rocketmq-messages.md#batches): the producer's batch body, and the broker's
stored records built from it.

A batch carries many messages of one topic and queue. The broker turns it into stored records in one
pass over the body, with one precompiled ``struct.Struct`` per record and no per-message dict: the
properties are scanned as bytes for the few keys the store needs (tags, keys, unique id). This is the
produce hot path, so it is written for speed first.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from functools import lru_cache

from tidemq.remoting.message import (
    MAGIC_MESSAGE,
    MAX_PROPERTIES,
    MessageDecodeError,
    SysFlag,
    host_flags,
    properties_field,
    record_head,
    tag_hash,
    topic_field,
)

_ITEM_HEAD = struct.Struct(">iiiii")  # total, magic, body CRC, flag, body length
_I16 = struct.Struct(">h")
ITEM_OVERHEAD = _ITEM_HEAD.size + _I16.size

_TAGS = b"TAGS\x01"
_KEYS = b"KEYS\x01"
_UNIQ_KEY = b"UNIQ_KEY\x01"
_DELAY = b"DELAY\x01"


@dataclass(slots=True)
class BatchItem:
    flag: int
    body: bytes
    properties: str


def encode_batch(items: list[BatchItem]) -> bytes:
    """The SEND_BATCH_MESSAGE body: each message as total, magic, CRC, flag, body, properties."""
    parts: list[bytes] = []
    append = parts.append
    pack_head, pack_len = _ITEM_HEAD.pack, _I16.pack
    for item in items:
        props = item.properties.encode()
        body = item.body
        append(pack_head(ITEM_OVERHEAD + len(body) + len(props), 0, 0, item.flag, len(body)))
        append(body)
        append(pack_len(len(props)))
        append(props)
    return b"".join(parts)


def decode_batch(buf: bytes | bytearray | memoryview) -> list[BatchItem]:
    items = []
    view = memoryview(buf)
    pos = 0
    while pos < len(view):
        flag, body_at, body_len, props_at, props_len, total = _item_bounds(view, pos)
        props = bytes(view[props_at : props_at + props_len])
        try:
            text = props.decode()
        except UnicodeDecodeError as exc:
            raise MessageDecodeError(f"batch record at {pos} has undecodable properties: {exc}") from None
        items.append(BatchItem(flag, bytes(view[body_at : body_at + body_len]), text))
        pos += total
    return items


def _item_bounds(view: memoryview, pos: int) -> tuple[int, int, int, int, int, int]:
    """(flag, body start, body length, properties start, properties length, item size) at ``pos``."""
    if pos + ITEM_OVERHEAD > len(view):
        raise MessageDecodeError(f"batch record at {pos} is truncated")
    total, _magic, _crc, flag, body_len = _ITEM_HEAD.unpack_from(view, pos)
    if total < ITEM_OVERHEAD or pos + total > len(view) or body_len < 0 or ITEM_OVERHEAD + body_len > total:
        raise MessageDecodeError(f"batch record at {pos} has inconsistent sizes")
    props_at = pos + _ITEM_HEAD.size + body_len + 2
    (props_len,) = _I16.unpack_from(view, props_at - 2)
    if props_len < 0 or props_at + props_len != pos + total:
        raise MessageDecodeError(f"batch record at {pos} has a bad properties length")
    return flag, pos + _ITEM_HEAD.size, body_len, props_at, props_len, total


# --- the broker side -----------------------------------------------------------------------------------


@dataclass(slots=True)
class StoredBatch:
    """Stored records laid back to back, for one queue; offsets are patched in by the store."""

    data: bytearray
    sizes: list[int]
    tags_codes: list[int]
    #: Per record, the keys to index (KEYS split on spaces, then UNIQ_KEY), as UTF-8.
    keys: list[list[bytes]] = field(default_factory=list)


@lru_cache(maxsize=1024)
def _tags_code(tags: bytes) -> int:
    return tag_hash(tags.decode(errors="replace"))


def property_value(props: bytes, key: bytes) -> bytes | None:
    """The value of ``key`` (given with its trailing \\x01) in encoded properties; the last one wins."""
    i = props.rfind(key)
    while i >= 0:
        if i == 0 or props[i - 1] == 2:
            start = i + len(key)
            end = props.find(b"\x02", start)
            return props[start : end if end >= 0 else len(props)]
        i = props.rfind(key, 0, i)
    return None


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

    ``extra_properties`` are the batch's own properties and the broker's (cluster), appended to each
    message's as Java's batch encoder does. Raises MessageDecodeError on a malformed body.
    """
    view = memoryview(body)
    topic_part = topic_field(topic)
    extra = extra_properties.encode()
    joined_extra = b"\x02" + extra
    sys_flag = host_flags(sys_flag & ~SysFlag.COMPRESSED, born_host, store_host)
    head = record_head(len(born_host), len(store_host))
    pack_head, pack_len, crc32 = head.pack, _I16.pack, zlib.crc32
    unpack_item, unpack_len = _ITEM_HEAD.unpack_from, _I16.unpack_from
    fixed = head.size + len(topic_part) + _I16.size
    tags_key, keys_key, delay_key, uniq_key = _TAGS, _KEYS, _DELAY, _UNIQ_KEY
    parts: list[bytes | memoryview] = []
    append = parts.append
    sizes: list[int] = []
    tags_codes: list[int] = []
    keys: list[list[bytes]] = []
    pos, end = 0, len(body)
    while pos < end:
        if pos + ITEM_OVERHEAD > end:
            raise MessageDecodeError(f"batch record at {pos} is truncated")
        total, _magic, _crc, flag, body_len = unpack_item(view, pos)
        props_at = pos + 22 + body_len
        props_end = pos + total
        if total < ITEM_OVERHEAD or props_end > end or body_len < 0 or props_at > props_end:
            raise MessageDecodeError(f"batch record at {pos} has inconsistent sizes")
        if body_len > max_body:
            raise MessageDecodeError(f"message body size {body_len} exceeds the maximum {max_body}")
        (props_len,) = unpack_len(view, props_at - 2)
        if props_at + props_len != props_end:
            raise MessageDecodeError(f"batch record at {pos} has a bad properties length")
        props = body[props_at:props_end]
        # Most messages name no tags, keys or delay: then only the unique id is looked for. (Searched in
        # the properties alone: the whole batch body, bodies and all, took half this loop's time.)
        if tags_key in props or keys_key in props or delay_key in props:
            tags_code, msg_keys = _scan(props)
        else:  # what ``_scan`` would find in such properties, without its three look-ups
            tags_code = 0
            uniq = property_value(props, uniq_key)
            msg_keys = [uniq] if uniq else []
        msg_body = view[pos + 20 : props_at - 2]
        if extra:
            props = props + joined_extra if props_len and props[-1] != 2 else props + extra
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
    stores a PUB or an MPUB. One ``struct`` pack per record; the tail after the body is built once."""
    tail = topic_field(topic) + properties_field(properties.encode())
    sys_flag = host_flags(0, born_host, store_host)
    head = record_head(len(born_host), len(store_host))
    fixed = head.size + len(tail)
    pack, crc32 = head.pack, zlib.crc32
    parts: list[bytes] = []
    append = parts.append
    sizes: list[int] = []
    for body in bodies:
        size = fixed + len(body)
        append(
            pack(
                size, MAGIC_MESSAGE, crc32(body) & 0x7FFFFFFF, queue_id, 0, 0, 0, sys_flag,
                timestamp, born_host, timestamp, store_host, 0, 0, len(body),
            )
        )  # fmt: skip
        append(body)
        append(tail)
        sizes.append(size)
    no_keys: list[bytes] = []  # never appended to: shared by every record
    return StoredBatch(bytearray().join(parts), sizes, [0] * len(bodies), [no_keys] * len(bodies))
