"""The reference record codec: build one record, decode one record, walk records laid back to back.

Written to be read: each field in layout order, every malformed input named in a MessageDecodeError.
The hand-optimised twins in ``_fast`` are pinned to these by property tests (tests/record/).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

from tidemq.record.layout import (
    HEAD_V4,
    HOSTS_V6,
    INT64,
    LOOPBACK_HOST,
    MAGIC_MESSAGE,
    MIN_RECORD_SIZE,
    POS_BORN_HOST,
    PROPERTIES_LENGTH,
    PROPERTIES_LENGTH_SIZE,
    RECORD_SUFFIX,
    TIMESTAMP_SIZE,
    TOPIC_LENGTH_SIZE,
    MessageDecodeError,
    SysFlag,
    body_crc,
    host_flags,
    host_sizes,
    properties_field,
    record_head,
    topic_field,
)
from tidemq.record.message import MessageExt
from tidemq.record.properties import decode_properties


def compress_body(body: bytes, level: int = 5) -> bytes:
    return zlib.compress(body, level)


def decompress_body(body: bytes) -> bytes:
    return zlib.decompress(body)


def encode_record(
    *,
    topic: str,
    queue_id: int,
    body: bytes | bytearray | memoryview,
    properties: str,
    flag: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: bytes = LOOPBACK_HOST,
    store_timestamp: int = 0,
    store_host: bytes = LOOPBACK_HOST,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    queue_offset: int = 0,
    commit_log_offset: int = 0,
) -> bytearray:
    """Build one stored record; the store patches queue and commit-log offsets in place on append."""
    tail = topic_field(topic) + properties_field(properties.encode())
    head = record_head(len(born_host), len(store_host))
    out = bytearray(
        head.pack(
            head.size + len(body) + len(tail), MAGIC_MESSAGE, body_crc(body), queue_id, flag, queue_offset,
            commit_log_offset, host_flags(sys_flag, born_host, store_host), born_timestamp, born_host,
            store_timestamp, store_host, reconsume_times, prepared_transaction_offset, len(body),
        )
    )  # fmt: skip
    out += body
    out += tail
    return out


def decode_record(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, decompress: bool = True, check_crc: bool = False
) -> MessageExt:
    view = memoryview(buf)
    try:
        fixed = HEAD_V4.unpack_from(view, pos)
        total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts = fixed[:9]
        if magic != MAGIC_MESSAGE:
            raise MessageDecodeError(f"bad magic code {magic:#x} at {pos}")
        if total < MIN_RECORD_SIZE or pos + total > len(view):
            raise MessageDecodeError(f"record size {total} at {pos} does not fit the buffer")
        if not sys_flag & HOSTS_V6:
            born_raw, store_ts, store_raw, reconsume, prepared, body_len = fixed[9:]
            p = pos + HEAD_V4.size
        else:
            born_len, store_len = host_sizes(sys_flag)
            p = pos + POS_BORN_HOST
            born_raw = bytes(view[p : p + born_len])
            p += born_len
            (store_ts,) = INT64.unpack_from(view, p)
            p += TIMESTAMP_SIZE
            store_raw = bytes(view[p : p + store_len])
            p += store_len
            reconsume, prepared, body_len = RECORD_SUFFIX.unpack_from(view, p)
            p += RECORD_SUFFIX.size
        end = pos + total
        if body_len < 0 or p + body_len > end:
            raise MessageDecodeError(f"body length {body_len} overruns the record at {pos}")
        body = bytes(view[p : p + body_len])
        p += body_len
        topic_len = view[p]
        p += TOPIC_LENGTH_SIZE
        topic = str(view[p : p + topic_len], "utf-8")
        p += topic_len
        (props_len,) = PROPERTIES_LENGTH.unpack_from(view, p)
        p += PROPERTIES_LENGTH_SIZE
        if props_len < 0 or p + props_len != end:
            raise MessageDecodeError(f"properties length {props_len} does not close the record at {pos}")
        props = decode_properties(str(view[p:end], "utf-8")) if props_len else {}
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, MessageDecodeError):
            raise
        raise MessageDecodeError(f"malformed record at {pos}: {exc}") from None
    if check_crc and body_crc(body) != crc:
        raise MessageDecodeError(f"body CRC mismatch at {pos}")
    if decompress and sys_flag & SysFlag.COMPRESSED:
        try:
            body = decompress_body(body)
        except zlib.error as exc:
            raise MessageDecodeError(f"compressed body does not inflate: {exc}") from None
    return MessageExt(
        topic,
        body,
        queue_id,
        queue_offset,
        phys,
        flag,
        sys_flag,
        born_ts,
        store_ts,
        store_raw,
        born_raw,
        reconsume,
        prepared,
        crc,
        total,
        props,
    )


def iter_records(buf: bytes | bytearray | memoryview, *, decompress: bool = True) -> Iterator[MessageExt]:
    """Decode records laid back to back (a pull or query response body)."""
    pos = 0
    view = memoryview(buf)
    while pos < len(view):
        msg = decode_record(view, pos, decompress=decompress)
        pos += msg.store_size
        yield msg
