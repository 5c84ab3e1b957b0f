"""The store on real files: recovery after a torn tail, consume-queue rebuild, segments, retention."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import time
from pathlib import Path

import pytest

from tests.support import hold_fsync
from tidemq.broker.offsets import OffsetTable
from tidemq.record import (
    LOOPBACK_HOST,
    BatchItem,
    MessageDecodeError,
    StoredBatch,
    build_stored_batch,
    build_uniform_batch,
    decode_record,
    encode_batch,
    encode_record,
    iter_records,
    tag_hash,
)
from tidemq.store import GetStatus, MessageStore, StoreConfig, StoreError, mapped_file, message_store
from tidemq.store.documents import read_json
from tidemq.store.mapped_file import MappedFile
from tidemq.store.requests import AppendRequest


def _append(
    store: MessageStore, topic: str, queue_id: int, body: bytes, tag: str = "t", keys: str = ""
) -> int:
    props = f"TAGS\x01{tag}" + (f"\x02KEYS\x01{keys}" if keys else "")
    record = encode_record(
        topic=topic, queue_id=queue_id, body=body, properties=props, store_timestamp=int(time.time() * 1000)
    )
    return store.put([AppendRequest(record, topic, queue_id, tag_hash(tag), keys.split())]).queue_offsets[0]


def _bodies(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    out: list[bytes] = []
    offset = store.min_offset(topic, queue_id)
    while True:
        got = store.get(topic, queue_id, offset, 32)
        if got.status is not GetStatus.FOUND:
            return out
        out += [m.body for m in iter_records(got.records)]
        assert got.count == got.next_begin_offset - offset
        offset = got.next_begin_offset


def _open(path: Path, **kw: object) -> MessageStore:
    return MessageStore(StoreConfig(path, segment_bytes=64 * 1024, cq_entries_per_file=100, **kw))  # type: ignore[arg-type]


async def test_torn_tail_is_cut_and_earlier_data_survives(tmp_path: Path) -> None:
    store = _open(tmp_path)
    for i in range(50):
        _append(store, "T", i % 2, f"msg-{i}".encode() * 10)
    end = store.commitlog.max_offset
    await store.close()
    seg = sorted((tmp_path / "commitlog").iterdir())[-1]
    with open(seg, "r+b") as f:  # a half-written record: size and magic written, the rest lost
        f.seek(end - int(seg.name))
        f.write(
            encode_record(topic="T", queue_id=0, body=b"torn" * 50, properties="", commit_log_offset=end)[:60]
        )
    os.remove(tmp_path / "checkpoint.json")  # also forces a full re-validation of the log
    reopened = _open(tmp_path)
    assert reopened.commitlog.max_offset == end
    assert _bodies(reopened, "T", 0) == [f"msg-{i}".encode() * 10 for i in range(0, 50, 2)]
    assert reopened.max_offset("T", 1) == 25
    assert _append(reopened, "T", 0, b"after") == 25  # appends continue right after the cut
    await reopened.close()


async def test_index_entries_for_a_cut_tail_are_forgotten(tmp_path: Path) -> None:
    """The index can be written further than the log survives (a crash); recovery drops what the cut
    tail had indexed, so the records written there next are indexed and found."""

    store = _open(tmp_path)
    for i in range(10):
        _append(store, "T", 0, f"body-{i}".encode(), keys=f"old{i}")
    cut = store.get("T", 0, 6, 1).records
    cut_at = decode_record(cut).commit_log_offset
    await store.close()  # the index now covers all ten records
    seg = sorted((tmp_path / "commitlog").iterdir())[0]
    with open(seg, "r+b") as f:  # the log loses records 6..9
        f.truncate(cut_at - int(seg.name))
    os.remove(tmp_path / "checkpoint.json")
    reopened = _open(tmp_path)
    assert reopened.max_offset("T", 0) == 6
    assert reopened.query_by_key("T", "old7", 5, 0, 0) == []
    assert _append(reopened, "T", 0, b"new", keys="new6") == 6  # written where record 6 was
    found = reopened.query_by_key("T", "new6", 5, 0, 0)
    assert [decode_record(m).body for m in found] == [b"new"]
    await reopened.close()


async def test_corrupt_body_crc_cuts_from_that_record(tmp_path: Path) -> None:
    store = _open(tmp_path)
    for i in range(10):
        _append(store, "T", 0, f"body-{i}".encode())
    sixth = store.get("T", 0, 6, 1).records
    phys = decode_record(sixth).commit_log_offset
    await store.close()
    seg = sorted((tmp_path / "commitlog").iterdir())[0]
    data = bytearray(seg.read_bytes())
    body_at = phys + 88
    data[body_at] ^= 0xFF
    seg.write_bytes(bytes(data))
    (tmp_path / "checkpoint.json").write_text('{"dispatched": 0}')
    reopened = _open(tmp_path)
    assert _bodies(reopened, "T", 0) == [f"body-{i}".encode() for i in range(6)]
    await reopened.close()


async def test_consume_queues_are_rebuilt_from_the_log(tmp_path: Path) -> None:
    store = _open(tmp_path)
    for i in range(30):
        _append(store, "Q", i % 3, f"{i}".encode(), keys=f"key-{i}")
    await store.close()
    (tmp_path / "checkpoint.json").unlink()
    for path in (tmp_path / "consumequeue" / "Q" / "1").iterdir():
        path.unlink()  # lost consume queue: must come back from the commit log
    reopened = _open(tmp_path)
    assert _bodies(reopened, "Q", 1) == [f"{i}".encode() for i in range(1, 30, 3)]
    assert len(reopened.query_by_key("Q", "key-7", 10, 0, 2**62)) == 1
    await reopened.close()


async def test_segments_roll_and_records_never_span_them(tmp_path: Path) -> None:
    store = _open(tmp_path)
    for i in range(400):
        _append(store, "Roll", 0, bytes([i % 256]) * 500)
    assert len(store.commitlog.segments) > 2
    assert _bodies(store, "Roll", 0) == [bytes([i % 256]) * 500 for i in range(400)]
    await store.close()
    reopened = _open(tmp_path)
    assert len(_bodies(reopened, "Roll", 0)) == 400
    assert _append(reopened, "Roll", 0, b"z") == 400
    await reopened.close()


async def test_retention_deletes_old_segments_and_moves_min_offset(tmp_path: Path) -> None:
    store = _open(tmp_path, file_reserved_hours=1.0)
    for i in range(400):
        _append(store, "Old", 0, b"x" * 500, keys=f"k{i}")
    first = store.commitlog.segments[0].path
    old = time.time() - 7200
    for seg in store.commitlog.segments[:-2]:
        os.utime(seg.path, (old, old))
    deleted = await store.apply_retention()
    assert deleted >= 1 and not first.exists()
    low = store.min_offset("Old", 0)
    assert low > 0
    assert store.get("Old", 0, 0, 32).status is GetStatus.OFFSET_TOO_SMALL
    assert store.get("Old", 0, low, 32).status is GetStatus.FOUND
    assert store.query_by_key("Old", "k0", 5, 0, 2**62) == []
    await store.close()


async def test_data_dir_is_locked_against_a_second_store(tmp_path: Path) -> None:
    store = _open(tmp_path)
    with pytest.raises(StoreError, match="in use"):
        _open(tmp_path)
    await store.close()
    _open(tmp_path)


async def test_every_record_of_a_put_is_indexed_before_any_listener_runs(tmp_path: Path) -> None:
    """A dispatch listener that fails (a timer index on a full disk) leaves the put's records findable."""
    store = _open(tmp_path)

    def failing(topic: str, queue_id: int, end: int, tags_code: int) -> None:
        raise OSError(errno.ENOSPC, "no space")

    store.dispatch_listeners.append(failing)
    requests = [
        AppendRequest(
            encode_record(topic="K", queue_id=0, body=k.encode(), properties=f"KEYS\x01{k}"), "K", 0, 0, [k]
        )
        for k in ("first", "second")
    ]
    with pytest.raises(OSError):
        store.put(requests)
    store.dispatch_listeners.remove(failing)
    for key in ("first", "second"):
        assert [decode_record(m).body for m in store.query_by_key("K", key, 5, 0, 0)] == [key.encode()]
    await store.close()


async def test_an_idle_store_does_not_rewrite_its_checkpoint(tmp_path: Path) -> None:
    """The queue flush runs every second; with nothing new it writes nothing (a laptop's idle server)."""
    store = _open(tmp_path)
    checkpoint = tmp_path / "checkpoint.json"
    _append(store, "T", 0, b"first")
    await store.flush_commitlog()
    await store.flush_queues()
    written = checkpoint.stat().st_ino  # a rewrite is a new file renamed over this one: another inode
    await store.flush_queues()
    assert checkpoint.stat().st_ino == written, "rewritten with nothing new"
    _append(store, "T", 0, b"second")
    await store.flush_commitlog()
    await store.flush_queues()
    assert read_json(checkpoint, {}) == {"dispatched": store.commitlog.max_offset}
    await store.close()


async def test_key_index_entries_whose_fsync_failed_are_fsynced_before_the_next_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed fsync leaves the index's entries written but not durable; the next flush must fsync the
    index again, or its checkpoint would pass entries that recovery then never re-indexes."""
    store = _open(tmp_path)
    _append(store, "T", 0, b"x", keys="K1")
    await store.flush_commitlog()
    real_fsync = os.fsync
    synced: list[str] = []

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "injected")

    def recording(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(OSError):
        await store.flush_queues()
    assert not (tmp_path / "checkpoint.json").exists()
    monkeypatch.setattr(os, "fsync", recording)
    await store.flush_queues()
    monkeypatch.undo()
    assert any(path.endswith("keys2.idx") for path in synced), synced
    assert read_json(tmp_path / "checkpoint.json", {}) == {"dispatched": store.commitlog.max_offset}
    await store.close()


async def test_sync_flush_group_commits_concurrent_writers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MessageStore(StoreConfig(tmp_path, flush_mode="sync"))  # type: ignore[arg-type]
    await store.start()
    fsyncs = 0
    real_fsync = os.fsync

    def counting(fd: int) -> None:
        nonlocal fsyncs
        fsyncs += 1
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting)

    async def writer(n: int) -> None:
        for _ in range(20):
            record = encode_record(topic="G", queue_id=n, body=b"x", properties="")
            result = store.put([AppendRequest(record, "G", n, 0)])
            await store.wait_durable(result.end_offset)
            assert store.commitlog.flushed >= result.end_offset

    await asyncio.gather(*(writer(n) for n in range(8)))
    assert 0 < fsyncs < 8 * 20, "concurrent senders must share fsyncs"
    await store.close()


async def test_durability_callbacks_are_each_told_once_even_when_one_raises(tmp_path: Path) -> None:
    """``on_durable``: each waiter is told when an fsync covers it, after a waiter whose callback raised;
    the ones still waiting at shutdown, and any that come later, are told why they never will be."""
    store = MessageStore(StoreConfig(tmp_path, flush_mode="sync"))  # type: ignore[arg-type]
    await store.start()
    told: list[tuple[str, StoreError | None]] = []

    def raising(failure: StoreError | None) -> None:
        told.append(("raising", failure))
        raise RuntimeError("a waiter's own bug")

    record = encode_record(topic="D", queue_id=0, body=b"x", properties="")
    end = store.put([AppendRequest(record, "D", 0, 0)]).end_offset
    assert not store.is_durable(end)
    store.on_durable(end, raising)
    store.on_durable(end, lambda failure: told.append(("after", failure)))
    await store.wait_durable(end)
    assert store.is_durable(end)
    assert told == [("raising", None), ("after", None)]

    store.on_durable(end + 10**9, lambda failure: told.append(("never", failure)))
    await store.close()
    store.on_durable(end + 10**9, lambda failure: told.append(("late", failure)))
    assert [(who, type(failure)) for who, failure in told[2:]] == [
        ("never", StoreError),
        ("late", StoreError),
    ]


def _batch_body(props: list[str]) -> bytes:
    return encode_batch([BatchItem(i, f"body-{i}".encode() * 20, p) for i, p in enumerate(props)])


def _stored(body: bytes, extra: str = "CLUSTER\x01c1") -> StoredBatch:
    return build_stored_batch(
        body,
        topic="B",
        queue_id=1,
        sys_flag=0,
        born_timestamp=11,
        born_host=b"\x7f\x00\x00\x01\x00\x00\x10\x00",
        store_timestamp=22,
        store_host=b"\x7f\x00\x00\x01\x00\x00\x27\x0f",
        extra_properties=extra,
        max_body=1024,
    )


@pytest.mark.parametrize("tagged", [False, True])  # the plain path (unique ids only) and the scanning one
async def test_batch_records_are_stored_back_to_back_and_indexed(tmp_path: Path, tagged: bool) -> None:
    props = [
        f"UNIQ_KEY\x01U{i}" + ("\x02TAGS\x01red\x02KEYS\x01k1 k2" if tagged and i == 1 else "")
        for i in range(3)
    ]

    store = _open(tmp_path)
    _append(store, "B", 1, b"first")
    result = store.put_batch("B", 1, _stored(_batch_body(props)))
    assert result.queue_offsets == [1, 2, 3]
    got = store.get("B", 1, 1, 32)
    msgs, pos = [], 0
    while pos < len(got.records):
        msgs.append(decode_record(got.records, pos, check_crc=True))
        pos += msgs[-1].store_size
    assert got.count == 3
    assert [m.body for m in msgs] == [f"body-{i}".encode() * 20 for i in range(3)]
    assert [(m.queue_offset, m.commit_log_offset) for m in msgs] == list(
        zip(result.queue_offsets, result.commit_log_offsets, strict=True)
    )
    assert [m.flag for m in msgs] == [0, 1, 2]
    assert all(m.properties["CLUSTER"] == "c1" and m.store_timestamp == 22 for m in msgs)
    assert msgs[1].properties["UNIQ_KEY"] == "U1"
    red = store.get("B", 1, 1, 32, match=lambda code: code == tag_hash("red"))
    assert [m.properties.get("TAGS") for m in iter_records(red.records)] == (["red"] if tagged else [])
    for key in ["U2", *(["k2"] if tagged else [])]:
        found = store.query_by_key("B", key, 5, 0, 0)
        assert [decode_record(m).queue_offset for m in found] == [3 if key == "U2" else 2]
    await store.close()
    reopened = _open(tmp_path)  # the index survives a restart
    assert len(reopened.query_by_key("B", "U0", 5, 0, 0)) == 1
    await reopened.close()


async def test_a_keyless_batch_skips_the_key_index_and_keyed_records_are_still_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nsqd's records have no key: storing them never reaches the key index (it was called once per PUB
    for nothing); a keyed record stored after them, and after a restart, is indexed and found."""
    store = _open(tmp_path)
    index = store.index
    assert index is not None

    def refuse(*args: object) -> None:
        raise AssertionError("the key index was called for keyless records")

    with monkeypatch.context() as patch:
        patch.setattr(index, "add_many", refuse)
        patch.setattr(index, "add_hashed", refuse)
        for count in (1, 3):
            bodies = [b"nsq-%d" % i for i in range(count)]
            batch = build_uniform_batch(
                bodies, topic="nsq:t", queue_id=0, properties="", timestamp=1,
                born_host=LOOPBACK_HOST, store_host=LOOPBACK_HOST,
            )  # fmt: skip
            store.put_batch("nsq:t", 0, batch)
    assert _bodies(store, "nsq:t", 0) == [b"nsq-0", b"nsq-0", b"nsq-1", b"nsq-2"]
    _append(store, "K", 0, b"keyed", keys="order-7")
    assert [m.body for m in map(decode_record, store.query_by_key("K", "order-7", 5, 0, 0))] == [b"keyed"]
    await store.close()
    reopened = _open(tmp_path)
    assert len(reopened.query_by_key("K", "order-7", 5, 0, 0)) == 1
    assert _bodies(reopened, "nsq:t", 0) == [b"nsq-0", b"nsq-0", b"nsq-1", b"nsq-2"]
    await reopened.close()


def test_batch_bodies_that_break_the_rules_are_refused() -> None:
    good = _batch_body(["UNIQ_KEY\x01a", "UNIQ_KEY\x01b"])
    with pytest.raises(MessageDecodeError, match="delay"):
        _stored(_batch_body(["UNIQ_KEY\x01a\x02DELAY\x013"]))
    with pytest.raises(MessageDecodeError, match="exceeds"):
        build_stored_batch(
            good, topic="B", queue_id=0, sys_flag=0, born_timestamp=0, born_host=b"\0" * 8,
            store_timestamp=0, store_host=b"\0" * 8, extra_properties="", max_body=10,
        )  # fmt: skip
    with pytest.raises(MessageDecodeError):
        _stored(good[:-3])
    with pytest.raises(MessageDecodeError, match="limit"):
        _stored(good, extra="X\x01" + "y" * 40000)
    assert len(_stored(good).sizes) == 2


async def test_offset_table_persists_off_the_loop_and_never_goes_back(tmp_path: Path) -> None:
    """The periodic persist writes on a worker thread; a snapshot taken earlier but written later must not
    replace a newer one (the close-time persist races the last periodic one)."""

    path = tmp_path / "consumerOffset.json"
    table = OffsetTable(path, "offsetTable")
    table.set("T@g", 0, 5)
    loop_thread = threading.get_ident()
    writers: list[int] = []
    original = table._file.write

    def recording_write(number: int, snapshot: dict[str, object]) -> None:
        writers.append(threading.get_ident())
        original(number, snapshot)

    table._file.write = recording_write  # type: ignore[method-assign]
    await table.persist_off_loop()
    assert writers and loop_thread not in writers, "the periodic write ran on the event loop"
    assert OffsetTable(path, "offsetTable").get("T@g", 0) == 5
    assert not table.dirty
    writers.clear()
    await table.persist_off_loop()
    assert writers == [], "nothing changed, nothing written"

    table.set("T@g", 0, 7)
    table.dirty = False
    late = table._file.take(table.snapshot())  # a periodic snapshot whose write is slow to run
    table.set("T@g", 0, 9)
    table.persist(force=True)  # close-time persist: the newest
    original(*late)
    assert OffsetTable(path, "offsetTable").get("T@g", 0) == 9


def _allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def test_segments_reserve_blocks_a_chunk_ahead_of_the_writes(tmp_path: Path) -> None:
    """Blocks are reserved in chunks ahead of the write position, never the whole segment up front, and
    a truncation gives the cut tail back."""
    mf = MappedFile(tmp_path / "seg", 0, 64 << 20, allocate_ahead=1 << 20)
    assert _allocated(mf.path) == 0
    mf.append(b"x" * 1000)
    if mf.allocate_ahead == 0:
        pytest.skip("the file system under tmp_path cannot reserve blocks")
    assert 1 << 20 <= _allocated(mf.path) < 2 << 20
    mf.append(b"y" * 1000)  # inside the reserved chunk
    assert _allocated(mf.path) < 2 << 20
    mf.append(b"y" * (3 << 19))  # past it: a chunk beyond this write's end is reserved
    assert 5 << 19 <= _allocated(mf.path) < 3 << 20
    assert mf.read(0, 1000) == b"x" * 1000 and mf.read(1000, 4) == b"yyyy"
    assert mf.read(mf.write_pos, 16) == bytes(16)  # reserved but unwritten reads as zeros, like a hole
    mf.truncate_to(500)
    assert _allocated(mf.path) <= 4096
    mf.append(b"z" * 10)
    assert mf.read(495, 15) == b"x" * 5 + b"z" * 10 and _allocated(mf.path) >= 1 << 20
    mf.close()


@pytest.mark.parametrize("errno_", [errno.EOPNOTSUPP, errno.ENOSPC])
def test_a_refused_reservation_leaves_the_write_to_decide(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, errno_: int
) -> None:
    """A file system that cannot reserve, or no room for a whole chunk: the bytes are still written, the
    file stops reserving ahead, and blocks a failed attempt took past the write position are given back."""
    real_reserve = mapped_file.reserve_blocks

    def refuse(fd: int, offset: int, length: int) -> None:
        if errno_ == errno.ENOSPC:
            real_reserve(fd, offset, length)  # as a file system that keeps part of a failed allocation
        raise OSError(errno_, os.strerror(errno_))

    monkeypatch.setattr(mapped_file, "reserve_blocks", refuse)
    mf = MappedFile(tmp_path / "seg", 0, 1 << 22, allocate_ahead=1 << 21)
    mf.append(b"abc")
    mf.append(b"def")
    assert mf.read(0, 6) == b"abcdef"
    assert mf.allocate_ahead == 0
    assert _allocated(mf.path) < 1 << 16
    mf.close()


async def _flush_held_in_fsync(
    store: MessageStore, monkeypatch: pytest.MonkeyPatch
) -> tuple[asyncio.Future[None], threading.Event]:
    """A queue flush started and held inside its thread's first fsync until the returned event is set."""
    inside, release = hold_fsync(monkeypatch, timeout=5)
    flush = asyncio.ensure_future(store.flush_queues())
    assert await asyncio.to_thread(inside.wait, 5)
    return flush, release


async def test_a_topic_deleted_while_its_queues_are_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleting a topic closes its consume-queue files; a flush already fsyncing them in its thread must
    neither fail on a closed descriptor nor lose the checkpoint."""

    store = MessageStore(StoreConfig(tmp_path))
    await store.start()
    try:
        _append(store, "Gone", 0, b"x")
        flush, release = await _flush_held_in_fsync(store, monkeypatch)
        store.delete_topic("Gone")
        release.set()
        await flush
        monkeypatch.undo()
        assert store.find_queue("Gone", 0) is None
        assert (tmp_path / "checkpoint.json").exists()
    finally:
        await store.close()


async def test_a_flush_cancelled_midway_lets_its_thread_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store closing cancels its flush loop: a flush whose fsyncs are running keeps the file-system lock
    until its thread is done, and the descriptors it duplicated are closed."""

    store = MessageStore(StoreConfig(tmp_path))
    await store.start()
    try:
        _append(store, "T", 0, b"x")
        open_before = len(os.listdir("/proc/self/fd"))
        flush, release = await _flush_held_in_fsync(store, monkeypatch)
        flush.cancel()
        await asyncio.sleep(0.1)
        assert not flush.done()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await flush
        monkeypatch.undo()
        assert len(os.listdir("/proc/self/fd")) == open_before
    finally:
        await store.close()


async def test_a_read_takes_a_queues_records_back_to_back_or_interleaved_up_to_the_byte_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read returns only its queue's records, in order, whether they lie back to back in the log or
    between another queue's, and stops at the transfer byte limit (taking at least one record)."""

    store = _open(tmp_path)
    monkeypatch.setattr(message_store, "MAX_TRANSFER_BYTES", 50 * 1024)
    big = 20 * 1024
    for i in range(4):
        _append(store, "Alone", 0, b"a%d" % i + b"." * big)
    for i in range(6):
        _append(store, "Mixed", 0, b"m%d" % i)
        _append(store, "Other", 0, b"o%d" % i)
    alone = store.get("Alone", 0, 0, 32)
    assert alone.count == 2 and alone.next_begin_offset == 2  # a third 20 KiB record is over the limit
    assert [m.body[:2] for m in iter_records(alone.records)] == [b"a0", b"a1"]
    mixed = store.get("Mixed", 0, 1, 4)
    assert [(m.queue_offset, m.body) for m in iter_records(mixed.records)] == [
        (i, b"m%d" % i) for i in range(1, 5)
    ]
    assert (mixed.count, mixed.next_begin_offset) == (4, 5)
    monkeypatch.setattr(message_store, "MAX_TRANSFER_BYTES", 10)  # less than one record
    one = store.get("Mixed", 0, 0, 4)
    assert one.count == 1 and [m.body for m in iter_records(one.records)] == [b"m0"]
    await store.close()
