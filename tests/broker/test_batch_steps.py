"""A big batch encoded in steps (broker/batch_steps.py) is the batch encoded in one go, byte for byte,
and a malformed one is refused the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tidemq.broker import batch_steps
from tidemq.record import (
    BatchItem,
    MessageDecodeError,
    build_stored_batch,
    encode_batch,
    encode_properties,
    offset_msg_ids,
)
from tidemq.store import MessageStore, StoreConfig

FIELDS: dict[str, Any] = {
    "topic": "T",
    "queue_id": 1,
    "sys_flag": 0,
    "born_timestamp": 1,
    "born_host": b"\x7f\0\0\1\0\0\0\1",
    "store_timestamp": 2,
    "store_host": b"\x7f\0\0\1\0\0\0\2",
    "extra_properties": "CLUSTER\x01c",
    "max_body": 4 * 1024 * 1024,
}


def _body(count: int) -> bytes:
    return encode_batch(
        [
            BatchItem(0, b"m%d" % i, encode_properties({"UNIQ_KEY": f"{i:032X}", "KEYS": f"k{i}"}))
            for i in range(count)
        ]
    )


async def test_steps_build_the_same_batch() -> None:
    body = _body(3 * batch_steps.STEP_MESSAGES + 7)
    assert len(list(batch_steps.slices(body))) == 4
    stepped = await batch_steps.build_in_steps(body, **FIELDS)
    whole = build_stored_batch(body, **FIELDS)
    assert (stepped.data, stepped.sizes, stepped.tags_codes, stepped.keys) == (
        whole.data,
        whole.sizes,
        whole.tags_codes,
        whole.keys,
    )


async def test_a_malformed_item_late_in_a_big_batch_is_refused() -> None:
    body = _body(2 * batch_steps.STEP_MESSAGES)[:-5]  # the last message cut short
    with pytest.raises(MessageDecodeError):
        await batch_steps.build_in_steps(body, **FIELDS)


async def test_offset_ids_in_steps_are_the_joined_ids() -> None:
    offsets = list(range(0, 100_000 * 90, 90))
    assert await batch_steps.offset_ids_in_steps(b"\x7f\0\0\1\0\0\0\2", offsets) == offset_msg_ids(
        b"\x7f\0\0\1\0\0\0\2", offsets
    )


async def test_keys_of_a_stepped_batch_are_found_in_the_index(tmp_path: Path) -> None:
    body = _body(batch_steps.STEP_MESSAGES + 3)
    stepped = await batch_steps.build_in_steps(body, **FIELDS)
    store = MessageStore(StoreConfig(tmp_path))
    try:
        result = store.put_batch("T", 1, stepped)
        assert store.index is not None
        last = batch_steps.STEP_MESSAGES + 2
        assert store.index.lookup("T", f"k{last}") == [result.commit_log_offsets[last]]
        assert store.index.lookup("T", f"{last:032X}") == [result.commit_log_offsets[last]]
    finally:
        await store.close()
