"""The broker's topic and subscription-group tables: permissions, Java's JSON shapes, the data version."""

from __future__ import annotations

from pathlib import Path

import orjson

from tidemq.broker.metadata import (
    DataVersion,
    SubscriptionGroupConfig,
    SubscriptionGroupTable,
    TopicConfig,
    TopicConfigTable,
)
from tidemq.remoting.route import PERM_INHERIT, PERM_READ, PERM_WRITE


def test_permission_bits_say_whether_a_topic_is_readable_and_writable() -> None:
    assert (PERM_READ, PERM_WRITE, PERM_INHERIT) == (4, 2, 1)
    assert TopicConfig("T").perm == PERM_READ | PERM_WRITE
    cases = {0: (False, False), PERM_READ: (True, False), PERM_WRITE: (False, True), 7: (True, True)}
    for perm, (readable, writable) in cases.items():
        config = TopicConfig("T", perm=perm)
        assert (config.readable, config.writable) == (readable, writable), perm
    assert not TopicConfig("T", perm=PERM_INHERIT).readable


def test_configs_use_java_field_names_and_ignore_unknown_ones() -> None:
    config = TopicConfig("T", 4, 8, order=True)
    assert config.to_json() == {
        "topicName": "T",
        "readQueueNums": 4,
        "writeQueueNums": 8,
        "perm": 6,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": True,
        "attributes": {},  # RocketMQ 5.x's topic attributes, always written by 5.x
    }
    assert TopicConfig.from_json({**config.to_json(), "unknownField": 1}) == config
    typed = TopicConfig.from_json({**config.to_json(), "attributes": {"message.type": "FIFO"}})
    assert typed.attributes == {"message.type": "FIFO"} and typed.to_json()["attributes"] == typed.attributes
    old_shape = {k: v for k, v in config.to_json().items() if k != "attributes"}  # 4.x wrote none
    assert TopicConfig.from_json(old_shape) == config
    group = SubscriptionGroupConfig.from_json({"groupName": "G", "retryMaxTimes": 3, "brokerId": 0})
    assert group == SubscriptionGroupConfig("G", retry_max_times=3)
    assert group.to_json()["whichBrokerWhenConsumeSlowly"] == 1


def test_data_version_counts_changes() -> None:
    version = DataVersion(3, 1000)
    version.bump()
    assert version.counter == 4 and version.timestamp > 1000
    assert version.to_json() == {"counter": 4, "timestamp": version.timestamp}
    assert DataVersion().timestamp > 0, "a new version is stamped now"


def test_topic_table_bumps_its_version_on_each_change_and_reloads(tmp_path: Path) -> None:
    path = tmp_path / "config" / "topics.json"
    table = TopicConfigTable(path)
    assert table.topics == {} and table.data_version.counter == 0
    table.put(TopicConfig("A", 2, 2))
    table.put(TopicConfig("B"))
    assert table.remove("missing") is None
    assert table.data_version.counter == 2, "removing nothing is no change"
    assert table.remove("B") == TopicConfig("B")
    assert table.data_version.counter == 3

    again = TopicConfigTable(path)  # from the journal: topics.json is not rewritten per change
    assert again.topics == {"A": TopicConfig("A", 2, 2)}
    assert again.data_version.to_json() == table.data_version.to_json()

    table.persist()
    assert not table.journal.path.exists(), "the journal is folded into topics.json"
    raw = orjson.loads(path.read_bytes())
    assert list(raw) == ["dataVersion", "topicConfigTable"]
    assert raw["dataVersion"] == table.data_version.to_json()
    assert raw["topicConfigTable"] == {"A": TopicConfig("A", 2, 2).to_json()}

    again = TopicConfigTable(path)
    assert again.topics == {"A": TopicConfig("A", 2, 2)}
    assert again.data_version.to_json() == table.data_version.to_json()


def test_subscription_group_changes_are_journaled_and_fold_into_javas_document(tmp_path: Path) -> None:
    path = tmp_path / "subscriptionGroup.json"
    table = SubscriptionGroupTable(path)
    table.put(SubscriptionGroupConfig("G1"))
    table.put(SubscriptionGroupConfig("G2", consume_enable=False))
    assert table.remove("G1") and not table.remove("G1")
    again = SubscriptionGroupTable(path)  # from the journal: the document is not rewritten per change
    assert again.get("G2") == SubscriptionGroupConfig("G2", consume_enable=False)
    assert again.get("G1") is None
    rewrites = 0
    for i in range(1000):
        before = path.stat().st_ino if path.exists() else None
        table.put(SubscriptionGroupConfig(f"G{i + 3}"))
        rewrites += (path.stat().st_ino if path.exists() else None) != before
    assert rewrites <= 8, f"subscriptionGroup.json rewritten {rewrites} times for 1,000 creates"
    table.close()
    assert not table.journal.path.exists()
    document = orjson.loads(path.read_bytes())
    assert document["dataVersion"] == table.data_version.to_json()
    assert len(document["subscriptionGroupTable"]) == 1001
    assert (
        document["subscriptionGroupTable"]["G2"]
        == SubscriptionGroupConfig("G2", consume_enable=False).to_json()
    )


def test_topic_changes_are_journaled_not_rewritten_and_compacted_in_proportion(tmp_path: Path) -> None:
    """N creates rewrite topics.json O(1) times per N changes: each change is one journal line."""
    path = tmp_path / "config" / "topics.json"
    table = TopicConfigTable(path)
    table.persist()
    rewrites = 0
    for i in range(1000):
        before = path.stat().st_mtime_ns, path.stat().st_ino
        table.put(TopicConfig(f"T{i}", 4, 4))
        rewrites += (path.stat().st_mtime_ns, path.stat().st_ino) != before
    assert rewrites <= 8, f"topics.json rewritten {rewrites} times for 1,000 creates"
    assert table.journal.entries <= len(table.topics)
    again = TopicConfigTable(path)
    assert again.topics == table.topics and again.data_version.counter == 1000


def test_a_torn_last_journal_line_is_dropped_and_an_old_journal_replays_harmlessly(tmp_path: Path) -> None:
    path = tmp_path / "config" / "topics.json"
    table = TopicConfigTable(path)
    table.put(TopicConfig("A", 2, 2))
    table.put(TopicConfig("B", 3, 3))
    journal = table.journal.path.read_bytes()
    table.persist()
    # A crash after the rewrite but before the journal went away, with a half-written change at its end.
    table.journal.path.write_bytes(journal + b'{"topic": "C", "con')
    again = TopicConfigTable(path)
    assert again.topics == {"A": TopicConfig("A", 2, 2), "B": TopicConfig("B", 3, 3)}
    assert again.data_version.counter == 2
