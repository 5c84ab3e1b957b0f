"""Pull-response bodies decoded straight into Arrow columns (no I/O).

``remoting.message.decode_record`` builds a full ``MessageExt`` per record, host strings included; the
source needs neither the objects nor the hosts, and per-record cost is what bounds a Spark read. This
walks the same stored layout (docs/protocols/rocketmq-messages.md#stored-record) and appends each field to its
column list.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tidemq.remoting.message import (
    MAGIC_MESSAGE,
    POS_BORN_HOST,
    MessageDecodeError,
    Prop,
    SysFlag,
    decode_properties,
)
from tidemq.spark.arrow import ARROW_SCHEMA, PROPERTIES_TYPE, TIMESTAMP_TYPE

_HEAD = struct.Struct(">iIiiiqqiq")
_TAIL = struct.Struct(">iqi")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")


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
        while pos < size:
            try:
                total, magic, _crc, _qid, _flag, offset, phys, sys_flag, born = _HEAD.unpack_from(view, pos)
                if magic != MAGIC_MESSAGE or total < 91 or pos + total > size:
                    raise MessageDecodeError(f"bad record header at {pos} (magic {magic:#x}, size {total})")
                p = pos + POS_BORN_HOST + (20 if sys_flag & SysFlag.BORNHOST_V6 else 8)
                (stored,) = _I64.unpack_from(view, p)
                store_len = 20 if sys_flag & SysFlag.STOREHOST_V6 else 8
                store_host = bytes(view[p + 8 : p + 8 + store_len])
                p += 8 + store_len
                reconsume, _prepared, body_len = _TAIL.unpack_from(view, p)
                p += 16
                body = bytes(view[p : p + body_len])
                p += body_len + 1 + view[p + body_len]
                (props_len,) = _I16.unpack_from(view, p)
                props = decode_properties(bytes(view[p + 2 : p + 2 + props_len]).decode())
                if body_len < 0 or props_len < 0 or p + 2 + props_len != pos + total:
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
            self.msg_ids.append(props.get(Prop.UNIQ_KEY) or (store_host + _I64.pack(phys)).hex().upper())
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
