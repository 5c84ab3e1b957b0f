"""Pull-response bodies decoded straight into Arrow columns (no I/O).

``tidemq.record.decode_record`` builds a full ``MessageExt`` per record, host strings included; the
source needs neither the objects nor the hosts, and per-record cost is what bounds a Spark read. This
walks the same stored layout (``tidemq.record.layout``, docs/protocols/rocketmq-messages.md#stored-record)
and appends each field to its column list.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tidemq.record import MessageDecodeError, Prop, SysFlag, decode_properties, offset_msg_id
from tidemq.record.layout import (
    HOST_V4_SIZE,
    HOST_V6_SIZE,
    INT64,
    MAGIC_MESSAGE,
    MIN_RECORD_SIZE,
    POS_BORN_HOST,
    PROPERTIES_LENGTH,
    PROPERTIES_LENGTH_SIZE,
    RECORD_PREFIX,
    RECORD_SUFFIX,
    TIMESTAMP_SIZE,
    TOPIC_LENGTH_SIZE,
)
from tidemq.spark.arrow import ARROW_SCHEMA, PROPERTIES_TYPE, TIMESTAMP_TYPE


@dataclass(slots=True)
class RecordColumns:
    """Rows of one queue, column by column, ready to become one Arrow record batch."""

    offsets: list[int] = field(default_factory=list)
    msg_ids: list[str] = field(default_factory=list)
    keys: list[str | None] = field(default_factory=list)
    tags: list[str | None] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    properties: list[list[tuple[str, str]]] = field(default_factory=list)
    born: list[int] = field(default_factory=list)
    stored: list[int] = field(default_factory=list)
    reconsume: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offsets)

    def append_records(
        self, buf: bytes | bytearray | memoryview, lo: int, hi: int, tag_set: frozenset[str]
    ) -> tuple[int, int]:
        """Append the records of ``buf`` whose queue offset is in ``[lo, hi)`` and whose tag is in
        ``tag_set`` (any tag when empty). Returns (records in ``buf``, smallest queue offset or -1)."""
        view = memoryview(buf)
        size = len(view)
        pos = seen = 0
        first = -1
        unpack_prefix, unpack_suffix = RECORD_PREFIX.unpack_from, RECORD_SUFFIX.unpack_from
        unpack_timestamp, unpack_props_len = INT64.unpack_from, PROPERTIES_LENGTH.unpack_from
        v4, v6, ts_size, suffix_size = HOST_V4_SIZE, HOST_V6_SIZE, TIMESTAMP_SIZE, RECORD_SUFFIX.size
        topic_len_size, props_len_size = TOPIC_LENGTH_SIZE, PROPERTIES_LENGTH_SIZE
        while pos < size:
            try:
                total, magic, _crc, _qid, _flag, offset, phys, sys_flag, born = unpack_prefix(view, pos)
                if magic != MAGIC_MESSAGE or total < MIN_RECORD_SIZE or pos + total > size:
                    raise MessageDecodeError(f"bad record header at {pos} (magic {magic:#x}, size {total})")
                p = pos + POS_BORN_HOST + (v6 if sys_flag & SysFlag.BORNHOST_V6 else v4)
                (stored,) = unpack_timestamp(view, p)
                p += ts_size
                store_len = v6 if sys_flag & SysFlag.STOREHOST_V6 else v4
                store_host = bytes(view[p : p + store_len])
                p += store_len
                reconsume, _prepared, body_len = unpack_suffix(view, p)
                p += suffix_size
                body = bytes(view[p : p + body_len])
                p += body_len + topic_len_size + view[p + body_len]
                (props_len,) = unpack_props_len(view, p)
                p += props_len_size
                props = decode_properties(bytes(view[p : p + props_len]).decode())
                if body_len < 0 or props_len < 0 or p + props_len != pos + total:
                    raise MessageDecodeError(f"record at {pos} does not add up to its size {total}")
            except (struct.error, IndexError, UnicodeDecodeError) as exc:
                raise MessageDecodeError(f"malformed record at {pos}: {exc}") from None
            pos += total
            seen += 1
            if first < 0 or offset < first:
                first = offset
            tag = props.get(Prop.TAGS)
            if not lo <= offset < hi or (tag_set and tag not in tag_set):
                continue
            if sys_flag & SysFlag.COMPRESSED:
                try:
                    body = zlib.decompress(body)
                except zlib.error as exc:
                    raise MessageDecodeError(f"compressed body at {pos} does not inflate: {exc}") from None
            self.offsets.append(offset)
            self.msg_ids.append(props.get(Prop.UNIQ_KEY) or offset_msg_id(store_host, phys))
            self.keys.append(props.get(Prop.KEYS))
            self.tags.append(tag)
            self.bodies.append(body)
            self.properties.append(list(props.items()))
            self.born.append(born)
            self.stored.append(stored)
            self.reconsume.append(reconsume)
        return seen, first

    def to_batch(self, topic: str, broker: str, queue_id: int) -> pa.RecordBatch:
        n = len(self.offsets)
        columns: list[Any] = [
            pa.array([topic] * n, pa.string()),
            pa.array([broker] * n, pa.string()),
            pa.array([queue_id] * n, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.msg_ids, pa.string()),
            pa.array(self.keys, pa.string()),
            pa.array(self.tags, pa.string()),
            pa.array(self.bodies, pa.binary()),
            pa.array(self.properties, PROPERTIES_TYPE),
            _millis(self.born),
            _millis(self.stored),
            pa.array(self.reconsume, pa.int32()),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def _millis(values: list[int]) -> Any:
    return pc.multiply(pa.array(values, pa.int64()), 1000).cast(TIMESTAMP_TYPE)
