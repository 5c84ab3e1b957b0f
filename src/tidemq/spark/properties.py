"""Encoded message properties, a batch of records at a time, into the source's columns (no I/O).

Properties are ``name\\x01value\\x02`` pairs (docs/protocols/rocketmq-messages.md#properties). A batch
almost always holds records from one kind of producer, whose every record names the same keys in the same
order (``UNIQ_KEY``, ``WAIT``, ``CLUSTER``, ...). That batch is cut with numpy at its separators in one
pass and checked to be exactly that shape; its keys are then known from the first record, and the
lookups of tags, keys and unique id are strided slices. Any other batch (keys that differ between
records, a pair without a separator or value, a key named twice) goes through Arrow's string kernels,
which read it as ``decode_properties`` does: such pairs dropped, the last value of a repeated key kept in
the key's first place.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tidemq.record import Prop, decode_properties
from tidemq.record.properties import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
from tidemq.spark.arrow import PROPERTIES_TYPE, spans

#: The columns ``decode`` gives: the properties map, then tags, keys and unique ids (null where absent).
Decoded = tuple[pa.Array, pa.Array, pa.Array, pa.Array]
_LOOKED_UP = (Prop.TAGS, Prop.KEYS, Prop.UNIQ_KEY)
_ZERO32 = pa.array([0], pa.int32())
_PAIR, _NAME = ord(PROPERTY_SEPARATOR), ord(NAME_VALUE_SEPARATOR)


def decode(text: pa.Array) -> Decoded:
    """The properties of each row of ``text`` (a string array) as the source's columns."""
    return _uniform(text) or _general(text)


def _uniform(text: pa.Array) -> Decoded | None:
    """The fast path, for a batch whose every record names the same keys in the same order; None for any
    other batch."""
    n = len(text)
    _, offsets_buf, values_buf = text.buffers()
    if not n or values_buf is None or text.offset:
        return None
    offsets = np.frombuffer(offsets_buf, np.int32, n + 1).astype(np.int64)
    first, last = int(offsets[0]), int(offsets[-1])
    raw = np.frombuffer(values_buf, np.uint8, last)
    # One scan per separator: faster than one scan for both split by value (4.8 vs 6.2 ms a batch of 8,192)
    separators = np.flatnonzero(raw[first:] == _PAIR) + first
    row_ends = offsets[1:]
    if not (row_ends > offsets[:-1]).all() or len(separators) % n:
        return None
    ended = raw[row_ends - 1] == _PAIR
    per_row = len(separators) // n
    if not (np.diff(np.searchsorted(separators, offsets)) == per_row).all():
        return None
    if ended.all():  # Java's encoding: every pair ends with a separator
        pair_ends = separators
        gaps = np.ones(len(pair_ends), np.int64)
    elif not ended.any():  # tidemq's and Go's: the last pair runs to the record's end
        pair_ends = np.column_stack([separators.reshape(n, per_row), row_ends]).ravel()
        per_row += 1
        gaps = np.ones(len(pair_ends), np.int64)
        gaps[per_row - 1 :: per_row] = 0  # the next record's first pair starts right at that end
    else:
        return None
    pairs = len(pair_ends)
    pair_starts = np.empty(pairs, np.int64)
    pair_starts[0] = first
    pair_starts[1:] = pair_ends[:-1] + gaps[:-1]
    name_ends = np.flatnonzero(raw[first:] == _NAME) + first
    # As many name separators as pairs, one inside each, with a name before and a value after it.
    if len(name_ends) != pairs or not ((name_ends > pair_starts) & (name_ends + 1 < pair_ends)).all():
        return None
    name_sizes = name_ends - pair_starts
    if not (name_sizes.reshape(n, per_row) == name_sizes[:per_row]).all():
        return None
    names = spans(values_buf, pair_starts, name_sizes, pa.string())
    row_width = int(name_sizes[:per_row].sum())
    name_bytes = np.frombuffer(names.buffers()[2], np.uint8, n * row_width)
    if not (name_bytes.reshape(n, row_width) == name_bytes[:row_width]).all():
        return None
    first_names = names.slice(0, per_row).to_pylist()
    if len(set(first_names)) != per_row:  # a key named twice: the general path keeps its last value
        return None
    values = spans(values_buf, name_ends + 1, pair_ends - name_ends - 1, pa.string())
    map_offsets = pa.array(np.arange(0, pairs + 1, per_row, dtype=np.int32))
    props = pa.MapArray.from_arrays(map_offsets, names, values, type=PROPERTIES_TYPE)
    tags, keys, uniq = (
        values.take(pa.array(np.arange(first_names.index(key), pairs, per_row)))
        if key in first_names
        else pa.nulls(n, pa.string())
        for key in _LOOKED_UP
    )
    return props, tags, keys, uniq


def _general(text: pa.Array) -> Decoded:
    """Any batch, with Arrow's string kernels: pairs without a separator, key or value are dropped."""
    items_list = pc.split_pattern(text, PROPERTY_SEPARATOR)
    pairs = pc.split_pattern(items_list.flatten(), NAME_VALUE_SEPARATOR, max_splits=1)
    whole = pc.equal(pc.list_value_length(pairs), 2)
    pairs = pc.filter(pairs, whole)
    keys = pc.list_element(pairs, 0)
    values = pc.list_element(pairs, 1)
    named = pc.and_(pc.greater(pc.binary_length(keys), 0), pc.greater(pc.binary_length(values), 0))
    parents = pc.filter(pc.filter(pc.list_parent_indices(items_list), whole), named)
    keys, values = pc.filter(keys, named), pc.filter(values, named)
    kept = pc.replace_with_mask(whole, whole, named)
    counted = pc.cumulative_sum(kept.cast(pa.int32()))
    item_ends = pc.subtract(items_list.offsets.slice(1), 1)
    offsets = pa.concat_arrays([_ZERO32, pc.take(counted, item_ends).cast(pa.int32())])
    if len(keys) and _repeats_a_key(parents, keys):
        dicts = [decode_properties(t) for t in text.to_pylist()]
        tags, msg_keys, uniq = (pa.array([d.get(key) for d in dicts], pa.string()) for key in _LOOKED_UP)
        return pa.array([list(d.items()) for d in dicts], PROPERTIES_TYPE), tags, msg_keys, uniq
    props = pa.MapArray.from_arrays(offsets, keys, values, type=PROPERTIES_TYPE)
    rows = pa.array(np.arange(len(text)))
    parents = parents.cast(pa.int64())
    tags, msg_keys, uniq = (_lookup(keys, values, parents, rows, key) for key in _LOOKED_UP)
    return props, tags, msg_keys, uniq


def _lookup(keys: Any, values: Any, parents: Any, rows: pa.Array, key: str) -> Any:
    """Each row's value for ``key`` (null where it has none), from the pairs of rows that name every key
    at most once: ``pc.map_lookup`` gives the same, at four times the cost."""
    hit = pc.equal(keys, pa.scalar(key, pa.string()))
    found = pc.filter(values, hit)
    none = pa.nulls(len(rows), pa.string())
    if not len(found):
        return none
    return pc.replace_with_mask(none, pc.is_in(rows, value_set=pc.filter(parents, hit)), found)


def _repeats_a_key(parents: Any, keys: Any) -> bool:
    """Whether one record names a property key twice (its map must then hold the key once)."""
    codes = pc.dictionary_encode(keys)
    width = len(codes.dictionary)
    pairs = np.asarray(parents, np.int64) * width + np.asarray(codes.indices, np.int64)
    return len(np.unique(pairs)) != len(pairs)
