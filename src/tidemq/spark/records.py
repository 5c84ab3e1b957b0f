"""Pull-response bodies decoded column-wise into Arrow (no I/O).

A Spark read is bound by per-record cost, so the only per-record Python here is the pass that finds where
each record ends (its first four bytes are its size). Everything else is gathered column by column with
numpy over the concatenated records of one batch (``tidemq.record.layout``,
docs/protocols/rocketmq-messages.md#stored-record):

* fixed-width fields (and each record's magic) are gathered at ``record start + field position`` and read
  as big-endian integers, so IPv6 hosts only move the positions;
* bodies and properties are spans of the buffer (offset, size per row), copied once into one Arrow array
  each, so no body is ever a Python ``bytes``;
* properties become the ``map<string,string>`` column and the tags, keys and unique id columns in
  ``tidemq.spark.properties``. Only rows that need more go one by one: a compressed body is inflated, and
  a record without a unique id gets its offset message id.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from tidemq.record import MessageDecodeError, SysFlag, offset_msg_id
from tidemq.record.layout import (
    HEAD_SIZE_V4,
    HOST_V4_SIZE,
    HOST_V6_SIZE,
    INT32,
    INT64,
    MAGIC_MESSAGE,
    MIN_RECORD_SIZE,
    POS_BORN_HOST,
    POS_BORN_TIMESTAMP,
    POS_MAGIC,
    POS_PHYSICAL_OFFSET,
    POS_QUEUE_OFFSET,
    POS_SYSFLAG,
    PROPERTIES_LENGTH_SIZE,
    RECORD_SUFFIX,
    SIZE_AND_MAGIC,
    TIMESTAMP_SIZE,
    TOPIC_LENGTH_SIZE,
)
from tidemq.spark import properties
from tidemq.spark.arrow import ARROW_SCHEMA, TIMESTAMP_TYPE, Ints, spans

#: How much longer a record's head is per IPv6 host.
_V6_EXTRA = HOST_V6_SIZE - HOST_V4_SIZE
_POS_STORE_TIMESTAMP = POS_BORN_HOST + HOST_V4_SIZE
_POS_RECONSUME = HEAD_SIZE_V4 - RECORD_SUFFIX.size
_POS_BODY_LENGTH = HEAD_SIZE_V4 - INT32.size


class RecordColumns:
    """The records of one queue taken from pull answers, decoded into one Arrow record batch on demand.

    ``append_records`` keeps the bytes of the records in range; ``to_batch`` decodes them all at once and
    drops those whose tag is not in ``tag_set`` (any tag when empty).
    """

    __slots__ = ("_nbytes", "_parts", "_sizes", "tag_set")

    def __init__(self, tag_set: frozenset[str] = frozenset()) -> None:
        self.tag_set = tag_set
        self._parts: list[bytes | memoryview] = []
        self._sizes: list[int] = []
        self._nbytes = 0

    def __len__(self) -> int:
        """Records kept so far (before the tag filter)."""
        return len(self._sizes)

    @property
    def nbytes(self) -> int:
        """Bytes of the records kept so far (a batch's Arrow offsets are 32-bit: keep it well under 2 GiB)."""
        return self._nbytes

    def append_records(self, buf: bytes | bytearray | memoryview, lo: int, hi: int) -> tuple[int, int]:
        """Keep the records of ``buf`` whose queue offset is in ``[lo, hi)``.

        Returns (records in ``buf``, the first one's queue offset or -1). Raises MessageDecodeError where a
        record's size is too small or overruns ``buf``, or where the first or the last record (each record,
        when the range cuts the answer) does not start with a record's magic; the rest of a record is
        checked in ``to_batch``.
        """
        view = memoryview(buf)
        size = len(view)
        unpack = INT32.unpack_from
        min_size = MIN_RECORD_SIZE
        sizes: list[int] = []
        pos = 0
        while pos < size:
            try:
                (total,) = unpack(view, pos)
            except struct.error:
                raise MessageDecodeError(f"truncated record header at {pos}") from None
            if total < min_size or pos + total > size:
                raise MessageDecodeError(f"bad record header at {pos} (size {total})")
            sizes.append(total)
            pos += total
        if not sizes:
            return 0, -1
        # A queue's records come in offset order: the first and the last bound the answer. Their magic is
        # checked here, so a damaged answer is unreadable rather than a gap in the offsets; the rest's is
        # checked in ``to_batch``.
        first, last = _checked_offset(view, 0), _checked_offset(view, pos - sizes[-1])
        if lo <= first and last < hi:
            self._parts.append(view)
            self._sizes.extend(sizes)
            self._nbytes += size
            return len(sizes), first
        pos = 0
        for total in sizes:
            offset = _checked_offset(view, pos)
            if lo <= offset < hi:
                self._parts.append(view[pos : pos + total])
                self._sizes.append(total)
                self._nbytes += total
            pos += total
        return len(sizes), first

    def to_batch(self, topic: str, broker: str, queue_id: int) -> pa.RecordBatch:
        """The kept records as one batch of ARROW_SCHEMA (tag filter applied); raises MessageDecodeError
        for a record whose lengths do not add up, or whose properties are not UTF-8."""
        data = b"".join(self._parts)
        batch = _decode(data, self._sizes, topic, broker, queue_id)
        if self.tag_set and batch.num_rows:
            keep = pc.fill_null(pc.is_in(batch.column(6), pa.array(sorted(self.tag_set), pa.string())), False)
            batch = batch.filter(keep)
        return batch


def _checked_offset(view: memoryview, pos: int) -> int:
    """The queue offset of the record at ``pos``, once its magic is checked."""
    _, magic = SIZE_AND_MAGIC.unpack_from(view, pos)
    if magic != MAGIC_MESSAGE:
        raise MessageDecodeError(f"bad record header at {pos} (magic {magic:#x})")
    offset: int = INT64.unpack_from(view, pos + POS_QUEUE_OFFSET)[0]
    return offset


def _be(data: bytes, at: Ints, width: int) -> Ints:
    """The signed big-endian integers of ``width`` (2, 4 or 8) bytes at byte positions ``at``: gathered
    from a view of ``data`` with an integer starting at every byte (stride 1), one element per row."""
    every_byte = np.ndarray((len(data) - width + 1,), f">i{width}", data, strides=(1,))
    values: Ints = every_byte[at].astype(np.int64)
    return values


def _decode(data: bytes, sizes: list[int], topic: str, broker: str, queue_id: int) -> pa.RecordBatch:
    n = len(sizes)
    if not n:
        return pa.RecordBatch.from_pylist([], schema=ARROW_SCHEMA)
    buf = np.frombuffer(data, np.uint8)
    totals = np.array(sizes, np.int64)
    ends = np.cumsum(totals)
    starts = ends - totals
    magic = _be(data, starts + POS_MAGIC, 4) & 0xFFFFFFFF
    _check(magic == MAGIC_MESSAGE, starts, "does not start with a record's magic")
    sys_flag = _be(data, starts + POS_SYSFLAG, 4)
    born_shift = np.where(sys_flag & SysFlag.BORNHOST_V6, _V6_EXTRA, 0)
    shift = born_shift + np.where(sys_flag & SysFlag.STOREHOST_V6, _V6_EXTRA, 0)
    _check(totals >= shift + MIN_RECORD_SIZE, starts, "is too short for its hosts")
    head = starts + shift
    body_len = _be(data, head + _POS_BODY_LENGTH, 4)
    body_at = head + HEAD_SIZE_V4
    topic_at = body_at + body_len
    tail = TOPIC_LENGTH_SIZE + PROPERTIES_LENGTH_SIZE
    _check((body_len >= 0) & (topic_at + tail <= ends), starts, "has a body longer than the record")
    props_len_at = topic_at + TOPIC_LENGTH_SIZE + buf[topic_at]
    _check(props_len_at + PROPERTIES_LENGTH_SIZE <= ends, starts, "has a topic too long")
    props_len = _be(data, props_len_at, 2)  # signed, as Java reads it: a negative one does not add up
    props_at = props_len_at + PROPERTIES_LENGTH_SIZE
    _check(props_at + props_len == ends, starts, "does not add up to its size")
    values = pa.py_buffer(data)
    bodies = spans(values, body_at, body_len, pa.binary())
    try:
        props_text = spans(values, props_at, props_len, pa.binary()).cast(pa.string())
    except pa.ArrowInvalid as exc:
        raise MessageDecodeError(f"properties that are not UTF-8: {exc}") from None
    compressed = (sys_flag & SysFlag.COMPRESSED) != 0
    if compressed.any():
        bodies = _inflate(bodies, compressed)
    props, tags, keys, uniq = properties.decode(props_text)
    msg_ids = uniq if not uniq.null_count else _offset_ids(data, starts, shift, born_shift, uniq)
    born = _be(data, starts + POS_BORN_TIMESTAMP, 8)
    stored = _be(data, starts + born_shift + _POS_STORE_TIMESTAMP, 8)
    columns: list[Any] = [
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(broker, pa.string()), n),
        pa.repeat(pa.scalar(queue_id, pa.int32()), n),
        pa.array(_be(data, starts + POS_QUEUE_OFFSET, 8)),
        msg_ids,
        keys,
        tags,
        bodies,
        props,
        pa.array(born * 1000, TIMESTAMP_TYPE),
        pa.array(stored * 1000, TIMESTAMP_TYPE),
        pa.array(_be(data, head + _POS_RECONSUME, 4).astype(np.int32)),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def _check(ok: npt.NDArray[np.bool_], starts: Ints, problem: str) -> None:
    if ok.all():
        return
    raise MessageDecodeError(f"record at {int(starts[int(np.argmin(ok))])} {problem}")


def _inflate(bodies: pa.Array, compressed: npt.NDArray[np.bool_]) -> pa.Array:
    """Bodies with the compressed ones inflated (only those rows become Python bytes)."""
    values: list[bytes | None] = bodies.to_pylist()
    for i in np.flatnonzero(compressed).tolist():
        try:
            values[i] = zlib.decompress(values[i] or b"")
        except zlib.error as exc:
            raise MessageDecodeError(f"compressed body of record {i} does not inflate: {exc}") from None
    return pa.array(values, pa.binary())


def _offset_ids(data: bytes, starts: Ints, shift: Ints, born_shift: Ints, uniq: pa.Array) -> pa.Array:
    """Message ids: the unique id where a record has one, its offset message id where it has none."""
    ids: list[str | None] = uniq.to_pylist()
    phys = _be(data, starts + POS_PHYSICAL_OFFSET, 8)
    for i in np.flatnonzero(np.asarray(uniq.is_null())).tolist():
        host_at = int(starts[i] + born_shift[i]) + _POS_STORE_TIMESTAMP + TIMESTAMP_SIZE
        host_len = HOST_V4_SIZE + int(shift[i] - born_shift[i])
        ids[i] = offset_msg_id(data[host_at : host_at + host_len], int(phys[i]))
    return pa.array(ids, pa.string())
