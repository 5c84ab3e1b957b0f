"""The store's durable JSON documents: atomic replace, the on-disk form, snapshots that never go back."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tidemq.store import MessageStore, StoreConfig
from tidemq.store.documents import Documents, JsonSnapshots, read_json, write_json_atomic


def test_a_document_is_indented_json_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "checkpoint.json"
    write_json_atomic(path, {"dispatched": 5})
    assert path.read_bytes() == b'{\n  "dispatched": 5\n}'
    write_json_atomic(path, {"dispatched": 7, "queues": {0: 1}})
    assert path.read_bytes() == b'{\n  "dispatched": 7,\n  "queues": {\n    "0": 1\n  }\n}'
    assert sorted(p.name for p in path.parent.iterdir()) == ["checkpoint.json"], "no temp file is left"


def test_a_missing_document_reads_as_the_default(tmp_path: Path) -> None:
    assert read_json(tmp_path / "absent.json", {"x": 1}) == {"x": 1}
    assert Documents(tmp_path / "nowhere").read("absent.json", None) is None


def test_documents_are_named_in_their_folder(tmp_path: Path) -> None:
    docs = Documents(tmp_path / "config")
    assert docs.path("topics.json") == tmp_path / "config" / "topics.json"
    docs.write("topics.json", {"topicConfigTable": {}})
    assert docs.read("topics.json", {}) == {"topicConfigTable": {}}
    assert read_json(tmp_path / "config" / "topics.json", None) == {"topicConfigTable": {}}
    assert docs.snapshots("topics.json").path == docs.path("topics.json")


def test_an_older_snapshot_written_late_does_not_replace_a_newer_one(tmp_path: Path) -> None:
    snapshots = JsonSnapshots(tmp_path / "state.json")
    late = snapshots.take({"n": 1})
    snapshots.write_now({"n": 2})
    snapshots.write(*late)
    assert read_json(snapshots.path, None) == {"n": 2}
    assert snapshots.last == {"n": 2}


def test_snapshots_written_off_the_loop_land(tmp_path: Path) -> None:
    snapshots = JsonSnapshots(tmp_path / "state.json")
    asyncio.run(snapshots.write_off_loop({"n": 3}))
    assert read_json(snapshots.path, None) == {"n": 3}


def test_the_store_gives_each_front_end_a_folder_and_tells_it_of_deleted_topics(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = MessageStore(StoreConfig(data_dir=tmp_path))
        try:
            assert store.documents("config").path("x.json") == tmp_path / "config" / "x.json"
            deleted: list[str] = []
            store.topic_deleted_listeners.append(deleted.append)
            store.delete_topic("T")
            assert deleted == ["T"]
        finally:
            await store.close()

    asyncio.run(scenario())
