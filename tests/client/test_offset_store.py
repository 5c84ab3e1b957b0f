"""The broadcasting offset store: offsets in a local file, kept through a backup, read back after a crash."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tidemq.client.consumer.offset_store import NO_OFFSET, LocalFileOffsetStore, ReadMode
from tidemq.client.message_queue import MessageQueue

Q0 = MessageQueue("T", "broker-a", 0)
Q1 = MessageQueue("T", "broker-a", 1)
OTHER = MessageQueue("U", "broker-b", 0)


def _store(base: Path) -> LocalFileOffsetStore:
    return LocalFileOffsetStore(base, "10.0.0.1@4321:x", "G")


def test_persisted_offsets_are_read_back_by_a_new_store(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.update(Q0, 10)
    store.update(OTHER, 3)
    asyncio.run(store.persist_all({Q0}))  # a local file holds the whole table, whatever is asked
    assert store.path == tmp_path / "10.0.0.1@4321_x" / "G" / "offsets.json"

    again = _store(tmp_path)
    again.load()
    assert again.offsets() == {Q0: 10, OTHER: 3}
    assert again.offsets("T") == {Q0: 10}


def test_read_modes(tmp_path: Path) -> None:
    writer = _store(tmp_path)
    writer.update(Q0, 7)
    asyncio.run(writer.persist(Q0))

    store = _store(tmp_path)
    assert asyncio.run(store.read(Q0, ReadMode.MEMORY_THEN_STORE)) == 7, "loads the file on first read"
    store.update(Q0, 9)
    assert asyncio.run(store.read(Q0, ReadMode.MEMORY)) == 9
    assert asyncio.run(store.read(Q0, ReadMode.STORE)) == 7, "the file still says 7"
    assert asyncio.run(store.read(Q1, ReadMode.MEMORY)) == NO_OFFSET
    assert asyncio.run(store.read(Q1, ReadMode.STORE)) == NO_OFFSET


def test_a_damaged_file_falls_back_to_the_backup(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.update(Q0, 5)
    asyncio.run(store.persist_all({Q0}))
    store.update(Q0, 6)
    asyncio.run(store.persist_all({Q0}))  # the file written first is now the backup
    store.path.write_bytes(b"{not json")

    again = _store(tmp_path)
    again.load()
    assert again.offsets() == {Q0: 5}


def test_nothing_is_written_for_an_empty_table(tmp_path: Path) -> None:
    asyncio.run(_store(tmp_path).persist_all(set()))
    assert not any(tmp_path.iterdir())


def test_increase_only_never_moves_an_offset_back(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.update(Q0, 10)
    store.update(Q0, 8, increase_only=True)
    assert store.offsets() == {Q0: 10}
    store.update(Q0, 8)
    assert store.offsets() == {Q0: 8}, "a plain update (seek, reset) may move it back"
    store.update(Q0, -1)
    assert store.offsets() == {Q0: 8}, "negative offsets are ignored"
