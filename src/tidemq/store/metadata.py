"""Broker metadata persisted next to the log: topic configs, subscription groups, consumer offsets.

Each table is one JSON file replaced atomically (write temp, fsync, rename), in the JSON shapes Java's
broker uses, so an operator reading ``config/*.json`` sees familiar documents.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import orjson

PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1


def write_json_atomic(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    data = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    with open(tmp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def read_json(path: Path, default: Any) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return default


class JsonSnapshots:
    """One JSON file replaced by numbered snapshots, written now (on the caller's thread) or on a worker
    thread so an event loop never waits on the disk; a snapshot taken earlier but written later never
    replaces a newer one (the close-time write races the last periodic one)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        #: The value of the newest snapshot written, for callers that skip writing an unchanged state.
        self.last: Any = None
        self._lock = threading.Lock()
        self._taken = 0
        self._written = 0

    def take(self, value: Any) -> tuple[int, Any]:
        self._taken += 1
        return self._taken, value

    def write(self, number: int, value: Any) -> None:
        with self._lock:
            if number > self._written:
                write_json_atomic(self.path, value)
                self._written, self.last = number, value

    def write_now(self, value: Any) -> None:
        self.write(*self.take(value))

    async def write_off_loop(self, value: Any) -> None:
        """``value`` is a snapshot already taken on the loop; only the write and its fsync move."""
        await asyncio.to_thread(self.write, *self.take(value))


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


class _JsonShape:
    """Dataclasses whose JSON form uses Java's camelCase names."""

    def to_json(self) -> dict[str, Any]:
        return {_camel(k): v for k, v in asdict(self).items()}  # type: ignore[call-overload]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Any:
        known = {_camel(f.name): f.name for f in fields(cls)}  # type: ignore[arg-type]
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


class DataVersion:
    def __init__(self, counter: int = 0, timestamp: int = 0) -> None:
        self.counter = counter
        self.timestamp = timestamp or int(time.time() * 1000)

    def bump(self) -> None:
        self.counter += 1
        self.timestamp = int(time.time() * 1000)

    def to_json(self) -> dict[str, int]:
        return {"counter": self.counter, "timestamp": self.timestamp}


class TopicConfigTable:
    """``config/topics.json``: every topic this broker holds."""

    def __init__(self, path: Path) -> None:
        self.path = path
        raw = read_json(path, {})
        self.topics: dict[str, TopicConfig] = {
            name: TopicConfig.from_json(cfg) for name, cfg in raw.get("topicConfigTable", {}).items()
        }
        dv = raw.get("dataVersion", {})
        self.data_version = DataVersion(dv.get("counter", 0), dv.get("timestamp", 0))

    def get(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    def put(self, config: TopicConfig) -> None:
        self.topics[config.topic_name] = config
        self.data_version.bump()
        self.persist()

    def remove(self, topic: str) -> TopicConfig | None:
        config = self.topics.pop(topic, None)
        if config is not None:
            self.data_version.bump()
            self.persist()
        return config

    def persist(self) -> None:
        write_json_atomic(
            self.path,
            {
                "dataVersion": self.data_version.to_json(),
                "topicConfigTable": {name: cfg.to_json() for name, cfg in self.topics.items()},
            },
        )


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


class OffsetTable:
    """``topic@group -> {queueId: offset}``, kept in memory and flushed periodically and on close.

    Also used for the schedule service's per-level offsets (``delayOffset.json``).
    """

    def __init__(self, path: Path, root_key: str) -> None:
        self.path = path
        self.root_key = root_key
        raw = read_json(path, {}).get(root_key, {})
        self.table: dict[str, dict[int, int]] = {
            key: {int(q): int(o) for q, o in queues.items()} for key, queues in raw.items()
        }
        self.dirty = False
        self._file = JsonSnapshots(path)

    def get(self, key: str, queue_id: int) -> int | None:
        return self.table.get(key, {}).get(queue_id)

    def set(self, key: str, queue_id: int, offset: int) -> None:
        self.table.setdefault(key, {})[queue_id] = offset
        self.dirty = True

    def remove_where(self, predicate: Any) -> None:
        for key in [k for k in self.table if predicate(k)]:
            del self.table[key]
            self.dirty = True

    def snapshot(self) -> dict[str, Any]:
        return {self.root_key: {k: {str(q): o for q, o in v.items()} for k, v in self.table.items()}}

    def persist(self, force: bool = False) -> None:
        if self.dirty or force:
            self.dirty = False
            self._file.write_now(self.snapshot())

    async def persist_off_loop(self) -> None:
        """The periodic persist: the snapshot is taken on the loop, the write and its fsync happen on a
        worker thread, so the loop (and every request it serves) never waits on the disk."""
        if self.dirty:
            self.dirty = False
            try:
                await self._file.write_off_loop(self.snapshot())
            except OSError:
                self.dirty = True
                raise
