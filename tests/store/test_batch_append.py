"""A big batch stored in steps (store/batch_append.py): its records in one write, its queue and index
entries a step at a time while its queue is held; other queues proceed meanwhile, a write to the held
queue lands behind the batch, a full disk refuses it whole, and a crash midway keeps it whole."""

from __future__ import annotations

import asyncio
import errno
import os
import time
from pathlib import Path

import pytest

from tidemq.record import (
    BatchItem,
    StoredBatch,
    build_stored_batch,
    encode_batch,
    encode_record,
    iter_records,
    tag_hash,
)
from tidemq.store import GetStatus, MessageStore, StoreConfig, StoreError, batch_append
from tidemq.store.consume_queue import ConsumeQueue
from tidemq.store.requests import AppendRequest

COUNT = 3 * batch_append.STEP_ENTRIES + 5  # several steps, the last one short


def _open(path: Path) -> MessageStore:
    return MessageStore(StoreConfig(path, segment_bytes=16 << 20, cq_entries_per_file=10_000))


def _batch(topic: str, count: int = COUNT) -> StoredBatch:
    items = [BatchItem(0, str(i).encode(), f"UNIQ_KEY\x01U{i}") for i in range(count)]
    return build_stored_batch(
        encode_batch(items),
        topic=topic,
        queue_id=0,
        sys_flag=0,
        born_timestamp=1,
        born_host=b"\x7f\x00\x00\x01\x00\x00\x10\x00",
        store_timestamp=2,
        store_host=b"\x7f\x00\x00\x01\x00\x00\x27\x0f",
        extra_properties="",
        max_body=1024,
    )


def _append(store: MessageStore, topic: str, body: bytes) -> int:
    record = encode_record(
        topic=topic, queue_id=0, body=body, properties="", store_timestamp=int(time.time() * 1000)
    )
    return store.put([AppendRequest(record, topic, 0, tag_hash(None))]).queue_offsets[0]


def _bodies(store: MessageStore, topic: str) -> list[bytes]:
    out: list[bytes] = []
    offset = 0
    while (got := store.get(topic, 0, offset, 4096, max_transfer=4096)).status is GetStatus.FOUND:
        out += [m.body for m in iter_records(got.records)]
        offset = got.next_begin_offset
    return out


async def test_other_queues_proceed_and_the_held_queue_waits_behind_the_batch(tmp_path: Path) -> None:
    store = _open(tmp_path)
    _append(store, "B", b"before")
    steps = 0
    seen: list[tuple[int, int]] = []  # (other queue's offset, held queue's offset) taken mid-batch

    async def beside() -> None:
        nonlocal steps
        while "B" not in {t for t, _ in store.holds}:
            await asyncio.sleep(0)
        while store.holds:
            seen.append((_append(store, "Other", b"o%d" % steps), _append(store, "B", b"behind%d" % steps)))
            steps += 1
            await asyncio.sleep(0)

    side = asyncio.create_task(beside())
    result = await store.put_batch_in_steps("B", 0, _batch("B"))
    await side
    assert steps >= 3, "the batch was stored without giving the loop back"
    assert result.queue_offsets == list(range(1, COUNT + 1))
    assert [b for _, b in seen] == list(range(COUNT + 1, COUNT + 1 + steps))  # behind it, in order
    assert _bodies(store, "B") == [
        b"before",
        *(str(i).encode() for i in range(COUNT)),
        *(b"behind%d" % i for i in range(steps)),
    ]
    assert len(_bodies(store, "Other")) == steps
    found = store.query_by_key("B", f"U{COUNT - 1}", 5, 0, 0)
    assert [m for m in found] == [store.read_message(result.commit_log_offsets[-1])]
    await store.close()


async def test_a_full_disk_midway_refuses_the_batch_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _open(tmp_path)
    _append(store, "B", b"before")
    log_end = store.commitlog.max_offset
    real = ConsumeQueue.append_many
    calls = 0

    def fail_second_step(self: ConsumeQueue, *args: list[int]) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(self, *args)

    monkeypatch.setattr(ConsumeQueue, "append_many", fail_second_step)
    with pytest.raises(StoreError, match="disk full"):
        await store.put_batch_in_steps("B", 0, _batch("B"))
    monkeypatch.setattr(ConsumeQueue, "append_many", real)
    assert not store.holds
    assert store.commitlog.max_offset == log_end  # the records are taken back too
    assert _append(store, "B", b"after") == 1  # the refused batch's offsets were never handed out
    assert _bodies(store, "B") == [b"before", b"after"]
    assert store.query_by_key("B", "U0", 5, 0, 0) == []
    await store.close()


async def test_a_crash_midway_leaves_the_batch_whole_after_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stuck = asyncio.Event()  # the batch stops after its first step, as a SIGKILL would stop it

    async def first_step_only() -> None:
        await stuck.wait()

    monkeypatch.setattr(batch_append, "give_way", first_step_only)
    store = _open(tmp_path)
    _append(store, "B", b"before")
    await store.flush_commitlog()
    await store.flush_queues()
    task = asyncio.create_task(store.put_batch_in_steps("B", 0, _batch("B")))
    while store.max_offset("B", 0) < 1 + batch_append.STEP_ENTRIES:
        await asyncio.sleep(0.01)
    await store.flush_commitlog()
    await store.flush_queues()  # mid-batch: the checkpoint must not pass the batch's first record
    assert 1 < store.max_offset("B", 0) < COUNT + 1
    # "Crash": the files stay as they are now; a new store opens them (the first one's lock is let go).
    os.close(store._lock_fd)
    reopened = _open(tmp_path)
    assert _bodies(reopened, "B") == [b"before", *(str(i).encode() for i in range(COUNT))]
    assert len(reopened.query_by_key("B", f"U{COUNT - 1}", 5, 0, 0)) == 1
    await reopened.close()
    task.cancel()
    stuck.set()
