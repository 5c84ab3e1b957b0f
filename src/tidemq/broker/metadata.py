"""The broker's topic and subscription-group tables: configs, permissions and the data version.

Each table is one durable JSON document of the store (``config/topics.json``,
``config/subscriptionGroup.json``) in the shapes Java's broker writes, so an operator reading them sees
familiar documents. Consumer offsets are in :mod:`tidemq.broker.offsets`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from tidemq.remoting.names import camel
from tidemq.remoting.route import PERM_READ, PERM_WRITE
from tidemq.store.documents import read_json, write_json_atomic
from tidemq.store.journal import DocumentJournal

_JSON_NAMES: dict[type, tuple[tuple[str, str], ...]] = {}


def _json_names(cls: type) -> tuple[tuple[str, str], ...]:
    """Each field's Python name and Java's camelCase name for it, worked out once per class."""
    names = _JSON_NAMES.get(cls)
    if names is None:
        names = _JSON_NAMES[cls] = tuple((f.name, camel(f.name)) for f in fields(cls))
    return names


class _JsonShape:
    """Dataclasses whose JSON form uses Java's camelCase names."""

    def to_json(self) -> dict[str, Any]:
        # Not dataclasses.asdict: its deep copy was most of the cost of writing a 10,000-topic table.
        return {
            key: dict(value) if isinstance(value, dict) else value
            for key, value in ((key, getattr(self, name)) for name, key in _json_names(type(self)))
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Any:
        known = {camel(f.name): f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{known[k]: v for k, v in data.items() if k in known})


@dataclass(slots=True)
class TopicConfig(_JsonShape):
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    #: RocketMQ 5.x topic attributes (``message.type``...), as 5.x writes them (broker/topic_attributes.py).
    attributes: dict[str, str] = field(default_factory=dict)

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


@dataclass(slots=True)
class SubscriptionGroupConfig(_JsonShape):
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    #: RocketMQ 5.x's orderly group flag: its 5.x (gRPC) consumers get messages in FIFO order.
    consume_message_orderly: bool = False


class DataVersion:
    """How many times the topic table changed, and when last: name servers compare it to skip re-reading
    an unchanged table."""

    def __init__(self, counter: int = 0, timestamp: int = 0) -> None:
        self.counter = counter
        self.timestamp = timestamp or int(time.time() * 1000)

    def bump(self) -> None:
        self.counter += 1
        self.timestamp = int(time.time() * 1000)

    def to_json(self) -> dict[str, int]:
        return {"counter": self.counter, "timestamp": self.timestamp}


class TopicConfigTable:
    """``config/topics.json``: every topic this broker holds.

    A change is appended to the document's journal (store/journal.py) before the caller answers, not
    written by rewriting the whole document: creating N topics one by one stays O(N), and an acknowledged
    create still survives a crash. ``topics.json`` keeps Java's shape and is brought up to date when the
    table is opened (the broker's start), closed, and whenever the journal is as long as the table.
    """

    #: The journal is folded into topics.json once it holds this many changes, or the table's size if more.
    COMPACT_MIN = 64

    def __init__(self, path: Path) -> None:
        self.path = path
        self.journal = DocumentJournal(path)
        raw = read_json(path, {})
        self.topics: dict[str, TopicConfig] = {
            name: TopicConfig.from_json(cfg) for name, cfg in raw.get("topicConfigTable", {}).items()
        }
        dv = raw.get("dataVersion", {})
        self.data_version = DataVersion(dv.get("counter", 0), dv.get("timestamp", 0))
        for change in self.journal.replay():
            self._apply(change)

    def _apply(self, change: dict[str, Any]) -> None:
        name, config = change["topic"], change["config"]
        if config is None:
            self.topics.pop(name, None)
        else:
            self.topics[name] = TopicConfig.from_json(config)
        dv = change["dataVersion"]
        self.data_version = DataVersion(dv["counter"], dv["timestamp"])

    def get(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    def put(self, config: TopicConfig) -> None:
        self.topics[config.topic_name] = config
        self.data_version.bump()
        self._record(config.topic_name, config.to_json())

    def remove(self, topic: str) -> TopicConfig | None:
        config = self.topics.pop(topic, None)
        if config is not None:
            self.data_version.bump()
            self._record(topic, None)
        return config

    def _record(self, topic: str, config: dict[str, Any] | None) -> None:
        self.journal.append({"topic": topic, "config": config, "dataVersion": self.data_version.to_json()})
        if self.journal.entries >= max(self.COMPACT_MIN, len(self.topics)):
            self.persist()

    def persist(self) -> None:
        """Rewrite topics.json from memory and empty the journal (O(topics): not on every change)."""
        self.journal.compact(self.document())

    def document(self) -> dict[str, Any]:
        return {
            "dataVersion": self.data_version.to_json(),
            "topicConfigTable": {name: cfg.to_json() for name, cfg in self.topics.items()},
        }


class SubscriptionGroupTable:
    """``config/subscriptionGroup.json``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        raw = read_json(path, {})
        self.groups: dict[str, SubscriptionGroupConfig] = {
            name: SubscriptionGroupConfig.from_json(cfg)
            for name, cfg in raw.get("subscriptionGroupTable", {}).items()
        }

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self.groups.get(group)

    def put(self, config: SubscriptionGroupConfig) -> None:
        self.groups[config.group_name] = config
        self.persist()

    def remove(self, group: str) -> bool:
        if self.groups.pop(group, None) is None:
            return False
        self.persist()
        return True

    def persist(self) -> None:
        write_json_atomic(
            self.path,
            {
                "subscriptionGroupTable": {name: cfg.to_json() for name, cfg in self.groups.items()},
            },
        )
