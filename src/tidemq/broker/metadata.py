"""The broker's topic and subscription-group tables: configs, permissions and the data version.

Each table is one durable JSON document of the store (``config/topics.json``,
``config/subscriptionGroup.json``) in the shapes Java's broker writes, so an operator reading them sees
familiar documents. Consumer offsets are in :mod:`tidemq.broker.offsets`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Generic, TypeVar

from tidemq.remoting.names import camel
from tidemq.remoting.route import PERM_READ, PERM_WRITE
from tidemq.store.documents import read_json
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


C = TypeVar("C", bound=_JsonShape)


class JournaledTable(Generic[C]):
    """A broker table of configs by name: Java's JSON document plus a journal of changes.

    A change is appended to the document's journal (store/journal.py) before the caller answers, not
    written by rewriting the whole document: creating N topics or groups one by one stays O(N), and an
    acknowledged create still survives a crash. The document keeps Java's shape and is brought up to date
    when the table is opened (the broker's start), closed, and whenever the journal is as long as the
    table.
    """

    #: The journal is folded into the document once it holds this many changes, or the table's size if more.
    COMPACT_MIN = 64

    def __init__(self, path: Path, shape: type[C], table_key: str, name_key: str) -> None:
        self.path = path
        self.journal = DocumentJournal(path)
        self._shape, self._table_key, self._name_key = shape, table_key, name_key
        raw = read_json(path, {})
        self.entries: dict[str, C] = {
            name: shape.from_json(cfg) for name, cfg in raw.get(table_key, {}).items()
        }
        dv = raw.get("dataVersion", {})
        self.data_version = DataVersion(dv.get("counter", 0), dv.get("timestamp", 0))
        for change in self.journal.replay():
            self._apply(change)

    def _apply(self, change: dict[str, Any]) -> None:
        name, config = change[self._name_key], change["config"]
        if config is None:
            self.entries.pop(name, None)
        else:
            self.entries[name] = self._shape.from_json(config)
        dv = change["dataVersion"]
        self.data_version = DataVersion(dv["counter"], dv["timestamp"])

    def get(self, name: str) -> C | None:
        return self.entries.get(name)

    def _put(self, name: str, config: C) -> None:
        self.entries[name] = config
        self.data_version.bump()
        self._record(name, config.to_json())

    def _remove(self, name: str) -> C | None:
        config = self.entries.pop(name, None)
        if config is not None:
            self.data_version.bump()
            self._record(name, None)
        return config

    def _record(self, name: str, config: dict[str, Any] | None) -> None:
        self.journal.append(
            {self._name_key: name, "config": config, "dataVersion": self.data_version.to_json()}
        )
        if self.journal.entries >= max(self.COMPACT_MIN, len(self.entries)):
            self.persist()

    def persist(self) -> None:
        """Rewrite the document from memory and empty the journal (O(table): not on every change)."""
        self.journal.compact(self.document())

    def close(self) -> None:
        self.persist()
        self.journal.close()

    def document(self) -> dict[str, Any]:
        return {
            "dataVersion": self.data_version.to_json(),
            self._table_key: {name: cfg.to_json() for name, cfg in self.entries.items()},
        }


class TopicConfigTable(JournaledTable[TopicConfig]):
    """``config/topics.json``: every topic this broker holds."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, TopicConfig, "topicConfigTable", "topic")

    @property
    def topics(self) -> dict[str, TopicConfig]:
        return self.entries

    def put(self, config: TopicConfig) -> None:
        self._put(config.topic_name, config)

    def remove(self, topic: str) -> TopicConfig | None:
        return self._remove(topic)


class SubscriptionGroupTable(JournaledTable[SubscriptionGroupConfig]):
    """``config/subscriptionGroup.json``: every subscription group this broker knows."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, SubscriptionGroupConfig, "subscriptionGroupTable", "group")

    @property
    def groups(self) -> dict[str, SubscriptionGroupConfig]:
        return self.entries

    def put(self, config: SubscriptionGroupConfig) -> None:
        self._put(config.group_name, config)

    def remove(self, group: str) -> bool:
        return self._remove(group) is not None
