"""The consumer-offset table: ``topic@group -> {queueId: offset}``, persisted only when it changed."""

from __future__ import annotations

from pathlib import Path

import orjson

from tidemq.broker.offsets import OffsetTable


def test_offsets_persist_in_javas_shape_and_reload(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    table = OffsetTable(path, "offsetTable")
    assert table.get("T@g", 0) is None
    table.set("T@g", 0, 5)
    table.set("T@g", 3, 9)
    table.set("%RETRY%g@g", 0, 1)
    table.persist()
    assert orjson.loads(path.read_bytes()) == {
        "offsetTable": {"T@g": {"0": 5, "3": 9}, "%RETRY%g@g": {"0": 1}}
    }
    again = OffsetTable(path, "offsetTable")
    assert again.table == {"T@g": {0: 5, 3: 9}, "%RETRY%g@g": {0: 1}}
    assert not again.dirty


def test_a_clean_table_is_written_only_when_forced(tmp_path: Path) -> None:
    path = tmp_path / "delayOffset.json"
    table = OffsetTable(path, "offsetTable")
    table.persist()
    assert not path.exists(), "nothing changed, nothing written"
    table.persist(force=True)
    assert orjson.loads(path.read_bytes()) == {"offsetTable": {}}
    table.set("SCHEDULE_TOPIC_XXXX", 2, 4)
    assert table.dirty
    table.persist()
    assert not table.dirty
    assert OffsetTable(path, "offsetTable").get("SCHEDULE_TOPIC_XXXX", 2) == 4


def test_removing_a_topic_forgets_every_groups_offsets_of_it_only(tmp_path: Path) -> None:
    table = OffsetTable(tmp_path / "consumerOffset.json", "offsetTable")
    for key in ("T@g1", "T@g2", "TT@g1", "U@T"):
        table.set(key, 0, 1)
    table.dirty = False
    table.remove_topic("T")
    assert sorted(table.table) == ["TT@g1", "U@T"]
    assert table.dirty
    table.dirty = False
    table.remove_where(lambda key: key.endswith("@g1"))
    assert sorted(table.table) == ["U@T"]
