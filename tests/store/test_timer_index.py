"""The store's durable time index: buckets, order, the checkpoint, and reopening after a crash."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tidemq.store.timer_index import CHECKPOINT, ENTRY_SIZE, TimeIndex


def _bucket_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("*.tix"))


def test_entries_go_to_their_time_bucket_and_only_due_ones_are_loaded(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path, bucket_ms=1000)
    for due in (1500, 1200, 5100, 90_000):
        index.add(due, due * 10)
    assert _bucket_files(tmp_path) == [f"{b:015d}.tix" for b in (1000, 5000, 90_000)]
    assert index.pop_due(1300, 10) == [(1200, 12000)]
    # Only buckets up to the one after "now" are read into memory.
    assert index.pop_due(1300, 10) == []
    assert len(index._heap) == 1
    assert index.next_due(1300) == 1500


def test_pop_due_returns_entries_in_due_then_ref_order_never_early(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path, bucket_ms=100)
    entries = [(250, 3), (120, 9), (250, 1), (130, 2), (399, 7), (120, 4)]
    for due, ref in entries:
        index.add(due, ref)
    assert index.pop_due(119, 10) == []
    assert index.pop_due(250, 10) == [(120, 4), (120, 9), (130, 2), (250, 1), (250, 3)]
    assert index.pop_due(398, 10) == []
    assert index.pop_due(1000, 1) == [(399, 7)]
    assert index.next_due(1000) is None


def test_limit_and_push_back_return_entries_in_order(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path, bucket_ms=100)
    for ref in range(5):
        index.add(50, ref)
    first = index.pop_due(60, 2)
    assert first == [(50, 0), (50, 1)]
    index.push_back(first)
    assert index.pop_due(60, 10) == [(50, r) for r in range(5)]


def test_add_before_the_checkpoint_is_refused(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path, bucket_ms=100)
    index.commit((500, 3))
    with pytest.raises(ValueError, match="not after"):
        index.add(400, 1)
    # Popped but not yet committed counts too: the entry would never be popped.
    index.add(600, 1)
    assert index.pop_due(700, 10) == [(600, 1)]
    with pytest.raises(ValueError, match="not after"):
        index.add(550, 2)


def test_checkpoint_survives_reopen_and_covers_delivered_entries(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path, bucket_ms=100)
    for due in (110, 120, 130, 240):
        index.add(due, due, indexed=due)
    popped = index.pop_due(125, 10)
    index.commit(popped[-1])
    index.flush()
    # Crash: no close; the reopened index pops only what is past the checkpoint.
    again = TimeIndex(tmp_path, bucket_ms=100)
    assert again.delivered == (120, 120)
    assert again.indexed == 240
    assert again.pop_due(10_000, 10) == [(130, 130), (240, 240)]


def test_a_flush_with_nothing_new_writes_nothing(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path, bucket_ms=100)
    index.add(110, 1, indexed=1)
    index.flush()
    written = (tmp_path / CHECKPOINT).stat().st_ino
    index.flush()
    assert (tmp_path / CHECKPOINT).stat().st_ino == written, "rewritten with nothing new"
    index.commit(index.pop_due(200, 10)[-1])
    index.flush()
    assert TimeIndex(tmp_path, bucket_ms=100).delivered == (110, 1)


def test_uncheckpointed_pops_come_back_after_a_crash(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path, bucket_ms=100)
    index.add(110, 1)
    index.add(120, 2)
    index.flush()
    assert index.pop_due(200, 10) == [(110, 1), (120, 2)]
    index.commit((120, 2))  # committed in memory only: never flushed
    again = TimeIndex(tmp_path, bucket_ms=100)
    assert again.pop_due(200, 10) == [(110, 1), (120, 2)]
    # A checkpoint kept elsewhere (the broker's, in the log) is adopted.
    other = TimeIndex(tmp_path, bucket_ms=100)
    other.restore_delivered((110, 1))
    assert other.pop_due(200, 10) == [(120, 2)]


def test_flush_deletes_buckets_the_checkpoint_covers(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path, bucket_ms=100)
    for due in (110, 150, 210, 330):
        index.add(due, 1)
    index.commit(index.pop_due(215, 10)[-1])
    index.flush()
    # Bucket 100 ends before 210; bucket 200 still holds (210, 1), the checkpoint itself.
    assert _bucket_files(tmp_path) == [f"{b:015d}.tix" for b in (200, 300)]


def test_a_torn_tail_is_cut_off_on_reopen(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path, bucket_ms=100)
    index.add(110, 1)
    index.add(120, 2)
    index.close()
    path = tmp_path / f"{100:015d}.tix"
    with open(path, "ab") as f:
        f.write(b"\x00\x01\x02")  # a partial entry, as a crash mid-write leaves
    again = TimeIndex(tmp_path, bucket_ms=100)
    again.add(130, 3)
    assert os.path.getsize(path) == 3 * ENTRY_SIZE
    assert again.pop_due(200, 10) == [(110, 1), (120, 2), (130, 3)]


def test_an_entry_with_a_bad_crc_ends_the_bucket(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path, bucket_ms=100)
    for ref in range(3):
        index.add(110, ref)
    index.close()
    path = tmp_path / f"{100:015d}.tix"
    data = bytearray(path.read_bytes())
    data[ENTRY_SIZE + 3] ^= 0xFF  # the second entry is garbage
    path.write_bytes(bytes(data))
    again = TimeIndex(tmp_path, bucket_ms=100)
    assert again.pop_due(200, 10) == [(110, 0)]
    again.add(150, 9)
    assert os.path.getsize(path) == 2 * ENTRY_SIZE


def test_add_missing_is_idempotent(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path, bucket_ms=100)
    index.add(110, 1, indexed=1)
    index.commit((110, 1))
    index.add(220, 2, indexed=2)
    assert not index.add_missing(110, 1, 1)  # delivered
    assert not index.add_missing(220, 2, 2)  # already in its bucket
    assert index.add_missing(330, 3, 3)
    assert index.indexed == 3
    assert index.pop_due(1000, 10) == [(220, 2), (330, 3)]
