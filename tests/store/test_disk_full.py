"""The store on a full disk (a small tmpfs, really filled): a refused write leaves no trace, index
entries survive a failed flush, and disk pressure refuses writes instead of deleting data."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.store.disk_full_support import fill, small_filesystem
from tidemq.record import encode_record, iter_records, tag_hash
from tidemq.store import GetStatus, MessageStore, StoreConfig, StoreError
from tidemq.store.requests import AppendRequest


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[Path]:
    with small_filesystem(tmp_path / "fs", "4m") as where:
        yield where


def _open(path: Path, **kw: object) -> MessageStore:
    return MessageStore(StoreConfig(path / "data", segment_bytes=64 * 1024, cq_entries_per_file=100, **kw))  # type: ignore[arg-type]


def _append(store: MessageStore, topic: str, body: bytes, keys: str = "") -> int:
    props = "TAGS\x01t" + (f"\x02KEYS\x01{keys}" if keys else "")
    record = encode_record(
        topic=topic, queue_id=0, body=body, properties=props, store_timestamp=int(time.time() * 1000)
    )
    return store.put([AppendRequest(record, topic, 0, tag_hash("t"), keys.split())]).queue_offsets[0]


def _bodies(store: MessageStore, topic: str) -> list[bytes]:
    out: list[bytes] = []
    offset = store.min_offset(topic, 0)
    while (got := store.get(topic, 0, offset, 32)).status is GetStatus.FOUND:
        out += [m.body for m in iter_records(got.records)]
        offset = got.next_begin_offset
    return out


async def test_a_refused_write_never_reuses_a_queue_offset(fs: Path) -> None:
    """Finding 4: the log record was stored, the consume-queue entry failed with a raw ENOSPC, and the next
    acknowledged write got the same queue offset; rebuilt from the log, the refused one came back."""
    store = _open(fs)  # not started: the disk guard never looks, so the write meets the raw ENOSPC
    acked = [f"a{i}".encode() for i in range(100)]  # fills the first consume-queue file exactly
    for body in acked:
        _append(store, "T", body)
    filler = fill(fs)
    with pytest.raises(StoreError, match="disk full"):
        _append(store, "T", b"refused")  # its log write fits the reserved blocks; its queue entry not
    filler.unlink()
    assert _append(store, "T", b"after") == 100
    assert _bodies(store, "T") == [*acked, b"after"]
    await store.close()
    shutil.rmtree(fs / "data" / "consumequeue")  # rebuild every queue from the log
    (fs / "data" / "checkpoint.json").unlink()
    reopened = _open(fs)
    assert _bodies(reopened, "T") == [*acked, b"after"]
    assert _append(reopened, "T", b"next") == 101
    await reopened.close()


async def test_key_index_entries_survive_a_flush_on_a_full_disk(fs: Path) -> None:
    """Finding 5: the index's pending entries were dropped when their write failed, and the checkpoint
    then moved past them: keys acknowledged before the disk filled were never found again."""
    store = _open(fs)
    for i in range(200):
        _append(store, "K", b"x", keys=f"k{i}")
    filler = fill(fs)
    await store.flush_commitlog()
    with pytest.raises(OSError):
        await store.flush_queues()  # the index file needs a block
    filler.unlink()
    for i in range(200, 400):
        _append(store, "K", b"x", keys=f"k{i}")
    await store.flush_commitlog()
    await store.flush_queues()
    await store.close()
    reopened = _open(fs)
    missing = [i for i in range(400) if not reopened.query_by_key("K", f"k{i}", 1, 0, 0)]
    assert missing == []
    await reopened.close()


async def test_a_full_disk_refuses_writes_and_deletes_nothing(fs: Path) -> None:
    """Finding 9: with the disk over 75 % used, retention deleted the oldest segment, seconds old."""
    store = _open(fs)
    for _ in range(300):
        _append(store, "R", b"y" * 500)
    segments = len(store.commitlog.segments)
    assert segments >= 3
    filler = fill(fs)
    assert await store.apply_retention() == 0
    assert len(store.commitlog.segments) == segments
    assert len(_bodies(store, "R")) == 300
    assert store.disk.check()
    with pytest.raises(StoreError, match="disk full"):
        _append(store, "R", b"refused")
    filler.unlink()
    assert not store.disk.check()
    assert _append(store, "R", b"accepted") == 300
    await store.close()


async def test_retention_bytes_caps_the_log(tmp_path: Path) -> None:
    store = _open(tmp_path, retention_bytes=128 * 1024)
    for _ in range(600):
        _append(store, "C", b"z" * 500)
    assert len(store.commitlog.segments) >= 5
    deleted = await store.apply_retention()
    assert deleted >= 2
    assert sum(seg.write_pos for seg in store.commitlog.segments) <= 128 * 1024
    low = store.min_offset("C", 0)
    assert low > 0 and len(_bodies(store, "C")) == 600 - low
    await store.close()
    assert os.path.isdir(tmp_path / "data" / "commitlog")
