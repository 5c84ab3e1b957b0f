"""Pull-response bodies decoded column-wise into Arrow (no I/O).

A Spark read is bound by per-record cost, so the only per-record Python here is the pass that finds where
each record ends (its first four bytes are its size) and checks its magic. Everything else is gathered
column by column over the concatenated records of one batch (``tidemq.record.layout``,
docs/protocols/rocketmq-messages.md#stored-record):

* fixed-width fields are read with ``take`` at ``record start + field position`` and assembled from
  their big-endian bytes, so IPv6 hosts only move the positions;
* bodies and properties are list views over the buffer (offset, size per row), flattened once into one
  Arrow array each, so no body is ever a Python ``bytes``;
* properties are split into the ``map<string,string>`` column by Arrow's string kernels, and tags, keys and
  the unique id are looked up in that map. Only rows that need more go one by one: a compressed body is
  inflated, a record without a unique id gets its offset message id, and a batch where one record repeats a
  property key has its properties parsed by ``decode_properties`` (the last value wins, in the key's first
  place, as with the codec's dict).
"""

from __future__ import annotations

import struct
import zlib
from functools import lru_cache
from itertools import accumulate, chain
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tidemq.record import MessageDecodeError, Prop, SysFlag, decode_properties, offset_msg_id
from tidemq.record.layout import (
    HEAD_SIZE_V4,
    HOST_V4_SIZE,
    HOST_V6_SIZE,
    INT32,
    MAGIC_MESSAGE,
    MIN_RECORD_SIZE,
    POS_BORN_HOST,
    POS_BORN_TIMESTAMP,
    POS_PHYSICAL_OFFSET,
    POS_QUEUE_OFFSET,
    POS_SYSFLAG,
    PROPERTIES_LENGTH_SIZE,
    RECORD_SUFFIX,
    TIMESTAMP_SIZE,
    TOPIC_LENGTH_SIZE,
)
from tidemq.record.properties import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
from tidemq.spark.arrow import ARROW_SCHEMA, PROPERTIES_TYPE, TIMESTAMP_TYPE

#: Total size, magic, 12 bytes (CRC, queue id, flag), queue offset: all the boundary pass reads.
_BOUNDARY = struct.Struct(">iI12xq")
#: How much longer a record's head is per IPv6 host.
_V6_EXTRA = HOST_V6_SIZE - HOST_V4_SIZE
_POS_STORE_TIMESTAMP = POS_BORN_HOST + HOST_V4_SIZE
_POS_RECONSUME = HEAD_SIZE_V4 - RECORD_SUFFIX.size
_POS_BODY_LENGTH = HEAD_SIZE_V4 - INT32.size
_MAX_PROPERTIES = 1 << 15
_ZERO32 = pa.array([0], pa.int32())
_KEY_TAGS, _KEY_KEYS, _KEY_UNIQ = (pa.scalar(k, pa.string()) for k in (Prop.TAGS, Prop.KEYS, Prop.UNIQ_KEY))


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

        Returns (records in ``buf``, smallest queue offset or -1). Raises MessageDecodeError where a record
        does not start with a record's magic or overruns ``buf``; the rest of a record is checked in
        ``to_batch``.
        """
        view = memoryview(buf)
        size = len(view)
        unpack = _BOUNDARY.unpack_from
        min_size, magic_code = MIN_RECORD_SIZE, MAGIC_MESSAGE
        sizes: list[int] = []
        queue_offsets: list[int] = []
        pos = 0
        while pos < size:
            try:
                total, magic, offset = unpack(view, pos)
            except struct.error:
                raise MessageDecodeError(f"truncated record header at {pos}") from None
            if magic != magic_code or total < min_size or pos + total > size:
                raise MessageDecodeError(f"bad record header at {pos} (magic {magic:#x}, size {total})")
            sizes.append(total)
            queue_offsets.append(offset)
            pos += total
        if not sizes:
            return 0, -1
        if lo <= min(queue_offsets) and max(queue_offsets) < hi:
            self._parts.append(view)
            self._sizes.extend(sizes)
            self._nbytes += size
        else:
            pos = 0
            for total, offset in zip(sizes, queue_offsets, strict=True):
                if lo <= offset < hi:
                    self._parts.append(view[pos : pos + total])
                    self._sizes.append(total)
                    self._nbytes += total
                pos += total
        return len(sizes), min(queue_offsets)

    def to_batch(self, topic: str, broker: str, queue_id: int) -> pa.RecordBatch:
        """The kept records as one batch of ARROW_SCHEMA (tag filter applied); raises MessageDecodeError
        for a record whose lengths do not add up, or whose properties are not UTF-8."""
        data = b"".join(self._parts)
        batch = _decode(data, self._sizes, topic, broker, queue_id)
        if self.tag_set and batch.num_rows:
            keep = pc.fill_null(pc.is_in(batch.column(6), pa.array(sorted(self.tag_set), pa.string())), False)
            batch = batch.filter(keep)
        return batch


@lru_cache(maxsize=64)
def _i(value: int, kind: pa.DataType = pa.int64()) -> pa.Scalar:  # noqa: B008 (an immutable type)
    """An Arrow scalar for a constant: a bare Python int given to a kernel costs a failed numpy import
    per call when numpy is absent (about 150 us, more than the kernel)."""
    return pa.scalar(value, kind)


def _be(u8: pa.Array, at: Any, width: int) -> Any:
    """The unsigned big-endian integers of ``width`` bytes at positions ``at``, as uint64."""
    kind = pa.uint64()
    value: Any = None
    for k in range(width):
        byte = pc.take(u8, pc.add(at, _i(k)) if k else at).cast(kind)
        shifted = pc.shift_left(byte, _i(8 * (width - 1 - k), kind)) if k < width - 1 else byte
        value = shifted if value is None else pc.bit_wise_or(value, shifted)
    return value


def _int64(u8: pa.Array, at: Any) -> Any:
    return _be(u8, at, 8).cast(pa.int64(), safe=False)


def _int32(u8: pa.Array, at: Any) -> Any:
    """Signed 32-bit fields, as Java writes them."""
    raw = _be(u8, at, 4).cast(pa.int64())
    return pc.subtract(raw, pc.multiply(pc.greater_equal(raw, _i(1 << 31)).cast(pa.int64()), _i(1 << 32)))


def _listed(values: pa.Array, offsets: Any, sizes: Any, kind: pa.DataType) -> pa.Array:
    """One ``kind`` (binary or string) array of the spans (offset, size) of ``values`` (uint8), spans in
    order and apart: the buffer itself is read as a binary array whose even elements are the spans (the
    odd ones are what lies between), and ``take`` copies the even ones out."""
    n = len(sizes)
    bounds = pa.concat_arrays([offsets.cast(pa.int32()), pc.add(offsets, sizes).cast(pa.int32())])
    interleaved = pc.take(bounds, _interleave(n))
    over_buffer = pa.Array.from_buffers(
        pa.binary(), 2 * n - 1, [None, interleaved.buffers()[1], values.buffers()[1]]
    )
    return pc.take(over_buffer, _evens(n)).cast(kind)


@lru_cache(maxsize=8)
def _interleave(n: int) -> pa.Array:
    """0, n, 1, n + 1, ...: the start and end of each span, side by side (cached: a batch is mostly the
    same number of rows)."""
    return pa.array(chain.from_iterable(zip(range(n), range(n, 2 * n), strict=True)), pa.int32())


@lru_cache(maxsize=8)
def _evens(n: int) -> pa.Array:
    return pa.array(range(0, 2 * n, 2), pa.int32())


def _decode(data: bytes, sizes: list[int], topic: str, broker: str, queue_id: int) -> pa.RecordBatch:
    n = len(sizes)
    if not n:
        return pa.RecordBatch.from_pylist([], schema=ARROW_SCHEMA)
    u8 = pa.Array.from_buffers(pa.uint8(), len(data), [None, pa.py_buffer(data)])
    starts = pa.array(accumulate(sizes[:-1], initial=0), pa.int64())
    totals = pa.array(sizes, pa.int64())
    ends = pc.add(starts, totals)
    sys_flag = _int32(u8, pc.add(starts, _i(POS_SYSFLAG)))
    born_v6 = pc.not_equal(pc.bit_wise_and(sys_flag, _i(SysFlag.BORNHOST_V6)), _i(0))
    store_v6 = pc.not_equal(pc.bit_wise_and(sys_flag, _i(SysFlag.STOREHOST_V6)), _i(0))
    born_shift = pc.multiply(born_v6.cast(pa.int64()), _i(_V6_EXTRA))
    shift = pc.add(born_shift, pc.multiply(store_v6.cast(pa.int64()), _i(_V6_EXTRA)))
    _check(pc.greater_equal(totals, pc.add(shift, _i(MIN_RECORD_SIZE))), starts, "is too short for its hosts")
    head = pc.add(starts, shift)
    body_len = _int32(u8, pc.add(head, _i(_POS_BODY_LENGTH)))
    body_at = pc.add(head, _i(HEAD_SIZE_V4))
    topic_at = pc.add(body_at, body_len)
    tail = TOPIC_LENGTH_SIZE + PROPERTIES_LENGTH_SIZE
    _check(
        pc.and_(pc.greater_equal(body_len, _i(0)), pc.less_equal(pc.add(topic_at, _i(tail)), ends)),
        starts,
        "has a body longer than the record",
    )
    topic_len = pc.take(u8, topic_at).cast(pa.int64())
    props_len_at = pc.add(pc.add(topic_at, _i(TOPIC_LENGTH_SIZE)), topic_len)
    _check(
        pc.less_equal(pc.add(props_len_at, _i(PROPERTIES_LENGTH_SIZE)), ends), starts, "has a topic too long"
    )
    props_len = _be(u8, props_len_at, 2).cast(pa.int64())
    props_at = pc.add(props_len_at, _i(PROPERTIES_LENGTH_SIZE))
    _check(
        pc.and_(pc.less(props_len, _i(_MAX_PROPERTIES)), pc.equal(pc.add(props_at, props_len), ends)),
        starts,
        "does not add up to its size",
    )
    bodies = _listed(u8, body_at, body_len, pa.binary())
    try:
        props_text = _listed(u8, props_at, props_len, pa.string())
    except pa.ArrowInvalid as exc:
        raise MessageDecodeError(f"properties that are not UTF-8: {exc}") from None
    compressed = pc.not_equal(pc.bit_wise_and(sys_flag, _i(SysFlag.COMPRESSED)), _i(0))
    if pc.any(compressed).as_py():
        bodies = _inflate(bodies, compressed)
    properties, tags, keys, uniq = _properties(props_text)
    queue_offsets = _int64(u8, pc.add(starts, _i(POS_QUEUE_OFFSET)))
    msg_ids = uniq
    if uniq.null_count:
        msg_ids = _offset_ids(data, starts, shift, born_shift, u8, uniq)
    born = _int64(u8, pc.add(starts, _i(POS_BORN_TIMESTAMP)))
    stored = _int64(u8, pc.add(starts, pc.add(born_shift, _i(_POS_STORE_TIMESTAMP))))
    reconsume = _int32(u8, pc.add(head, _i(_POS_RECONSUME))).cast(pa.int32())
    columns: list[Any] = [
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(broker, pa.string()), n),
        pa.repeat(pa.scalar(queue_id, pa.int32()), n),
        queue_offsets,
        msg_ids,
        keys,
        tags,
        bodies,
        properties,
        _millis(born),
        _millis(stored),
        reconsume,
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def _check(ok: Any, starts: Any, problem: str) -> None:
    if pc.all(ok).as_py():
        return
    first = pc.index(ok, False).as_py()
    raise MessageDecodeError(f"record at {starts[first].as_py()} {problem}")


def _inflate(bodies: pa.Array, compressed: Any) -> pa.Array:
    """Bodies with the compressed ones inflated (only those rows become Python bytes)."""
    values: list[bytes | None] = bodies.to_pylist()
    for i in pc.indices_nonzero(compressed).to_pylist():
        try:
            values[i] = zlib.decompress(values[i] or b"")
        except zlib.error as exc:
            raise MessageDecodeError(f"compressed body of record {i} does not inflate: {exc}") from None
    return pa.array(values, pa.binary())


def _offset_ids(data: bytes, starts: Any, shift: Any, born_shift: Any, u8: pa.Array, uniq: Any) -> Any:
    """Message ids: the unique id where a record has one, its offset message id where it has none."""
    missing = pc.indices_nonzero(pc.is_null(uniq)).to_pylist()
    ids: list[str | None] = uniq.to_pylist()
    phys = _int64(u8, pc.add(starts, _i(POS_PHYSICAL_OFFSET))).to_pylist()
    start_list, born_list, shift_list = starts.to_pylist(), born_shift.to_pylist(), shift.to_pylist()
    for i in missing:
        host_at = start_list[i] + _POS_STORE_TIMESTAMP + born_list[i] + TIMESTAMP_SIZE
        host_len = HOST_V4_SIZE + (shift_list[i] - born_list[i])
        ids[i] = offset_msg_id(data[host_at : host_at + host_len], phys[i])
    return pa.array(ids, pa.string())


def _properties(text: pa.Array) -> tuple[pa.Array, Any, Any, Any]:
    """(properties map, tags, keys, unique ids) of encoded properties, as ``decode_properties`` reads them:
    pairs without a separator, key or value are dropped."""
    items_list = pc.split_pattern(text, PROPERTY_SEPARATOR)
    pairs = pc.split_pattern(items_list.flatten(), NAME_VALUE_SEPARATOR, max_splits=1)
    whole = pc.equal(pc.list_value_length(pairs), _i(2, pa.int32()))
    pairs = pc.filter(pairs, whole)
    keys = pc.list_element(pairs, _i(0, pa.int32()))
    values = pc.list_element(pairs, _i(1, pa.int32()))
    named = pc.and_(
        pc.greater(pc.binary_length(keys), _i(0, pa.int32())),
        pc.greater(pc.binary_length(values), _i(0, pa.int32())),
    )
    parents = pc.filter(pc.filter(pc.list_parent_indices(items_list), whole), named)
    keys, values = pc.filter(keys, named), pc.filter(values, named)
    kept = pc.replace_with_mask(whole, whole, named)
    counted = pc.cumulative_sum(kept.cast(pa.int32()))
    item_ends = pc.subtract(items_list.offsets.slice(1), _i(1, pa.int32()))
    offsets = pa.concat_arrays([_ZERO32, pc.take(counted, item_ends)])
    if len(keys) and _repeats_a_key(parents, keys):
        dicts = [decode_properties(t) for t in text.to_pylist()]
        props = pa.array([list(d.items()) for d in dicts], PROPERTIES_TYPE)
        return (
            props,
            pa.array([d.get(Prop.TAGS) for d in dicts], pa.string()),
            pa.array([d.get(Prop.KEYS) for d in dicts], pa.string()),
            pa.array([d.get(Prop.UNIQ_KEY) for d in dicts], pa.string()),
        )
    props = pa.MapArray.from_arrays(offsets, keys, values, type=PROPERTIES_TYPE)
    rows = pa.array(range(len(text)), pa.int64())
    parents = parents.cast(pa.int64())
    return (
        props,
        *(_lookup(keys, values, parents, rows, key) for key in (_KEY_TAGS, _KEY_KEYS, _KEY_UNIQ)),
    )


def _lookup(keys: Any, values: Any, parents: Any, rows: pa.Array, key: pa.Scalar) -> Any:
    """Each row's value for ``key`` (null where it has none), from the pairs of rows that name every key
    at most once: ``pc.map_lookup`` gives the same, at four times the cost."""
    hit = pc.equal(keys, key)
    found = pc.filter(values, hit)
    none = pa.nulls(len(rows), pa.string())
    if not len(found):
        return none
    return pc.replace_with_mask(none, pc.is_in(rows, value_set=pc.filter(parents, hit)), found)


def _repeats_a_key(parents: Any, keys: Any) -> bool:
    """Whether one record names a property key twice (its map must then hold the key once)."""
    codes = pc.dictionary_encode(keys)
    width = _i(len(codes.dictionary))
    pairs = pc.add(pc.multiply(parents.cast(pa.int64()), width), codes.indices.cast(pa.int64()))
    return bool(pc.count_distinct(pairs).as_py() != len(pairs))


def _millis(values: Any) -> Any:
    return pc.multiply(values, _i(1000)).cast(TIMESTAMP_TYPE)
