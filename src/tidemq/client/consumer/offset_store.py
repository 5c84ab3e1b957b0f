"""Where consume offsets live: on the broker for clustering, in a local file for broadcasting
(docs/protocols/rocketmq-consumption.md#offset-store).

The stored value is the next offset to consume. Offsets are kept in memory and persisted every 5 s, when
a queue is dropped, and on shutdown.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tidemq.client import api
from tidemq.client.message_queue import MessageQueue
from tidemq.remoting import jsonx
from tidemq.remoting.transport import RemotingConnection, RemotingError

if TYPE_CHECKING:
    from tidemq.client.instance import ClientInstance

log = logging.getLogger(__name__)

NO_OFFSET = -1
READ_ERROR = -2


class ReadMode(enum.Enum):
    MEMORY = "MEMORY"
    STORE = "READ_FROM_STORE"
    MEMORY_THEN_STORE = "MEMORY_FIRST_THEN_STORE"


class OffsetStore(Protocol):
    async def read(self, mq: MessageQueue, mode: ReadMode) -> int: ...

    def update(self, mq: MessageQueue, offset: int, increase_only: bool = False) -> None: ...

    async def persist(self, mq: MessageQueue) -> None: ...

    async def persist_all(self, mqs: set[MessageQueue]) -> None: ...

    def remove(self, mq: MessageQueue) -> None: ...

    def offsets(self, topic: str | None = None) -> dict[MessageQueue, int]: ...


class _MemoryTable:
    def __init__(self) -> None:
        self.table: dict[MessageQueue, int] = {}

    def update(self, mq: MessageQueue, offset: int, increase_only: bool = False) -> None:
        if offset < 0:
            return
        current = self.table.get(mq)
        if current is None or not increase_only or offset > current:
            self.table[mq] = offset

    def remove(self, mq: MessageQueue) -> None:
        self.table.pop(mq, None)

    def offsets(self, topic: str | None = None) -> dict[MessageQueue, int]:
        return {mq: off for mq, off in self.table.items() if topic is None or mq.topic == topic}


class RemoteBrokerOffsetStore(_MemoryTable):
    """Clustering: the broker holds the group's offsets (QUERY/UPDATE_CONSUMER_OFFSET)."""

    def __init__(self, instance: ClientInstance, group: str) -> None:
        super().__init__()
        self.instance = instance
        self.group = group
        #: (broker, topic) pairs this store has committed to, with the connection that commit went over:
        #: their offset table exists on the broker at the far end of that connection. A new connection
        #: (the broker restarted, or another master took over) may lead to a broker without it.
        self._committed: dict[tuple[str, str], RemotingConnection] = {}
        #: Held by a pair's first commit while it is on the wire (``persist``); dropped once one succeeded.
        self._first_commits: dict[tuple[str, str], asyncio.Lock] = {}

    async def read(self, mq: MessageQueue, mode: ReadMode) -> int:
        if mode is not ReadMode.STORE and mq in self.table:
            return self.table[mq]
        if mode is ReadMode.MEMORY:
            return NO_OFFSET
        try:
            conn = await self.instance.broker_connection(mq.broker_name)
            offset = await api.query_consumer_offset(conn, self.group, mq.topic, mq.queue_id)
        except api.BrokerError:
            return NO_OFFSET
        except (RemotingError, OSError, Exception) as exc:
            log.warning("reading the offset of %s from its broker failed: %s", mq, exc)
            return READ_ERROR
        if offset is None:
            return NO_OFFSET
        self.update(mq, offset)
        return offset

    async def persist(self, mq: MessageQueue) -> None:
        """Commit ``mq``'s offset. A topic's first commit to a broker (over a connection) goes alone, the
        others of that topic waiting for it (and the next one going alone if it failed): Apache
        RocketMQ's broker creates a group's offset table of a topic without a lock, so of two first
        commits arriving together one can be lost (seen with 4.9.7: a queue read to its end kept its
        whole lag)."""
        if mq not in self.table:
            return
        try:
            conn = await self.instance.broker_connection(mq.broker_name)
        except Exception as exc:
            log.warning("persisting the offset of %s failed: %s", mq, exc)
            return
        pair = (mq.broker_name, mq.topic)
        if self._committed.get(pair) is not conn:
            async with self._first_commits.setdefault(pair, asyncio.Lock()):
                if self._committed.get(pair) is not conn:
                    await self._commit(mq, conn)
                    return
        await self._commit(mq, conn)

    async def _commit(self, mq: MessageQueue, conn: RemotingConnection) -> None:
        offset = self.table.get(mq)
        if offset is None:
            return
        try:
            await api.update_consumer_offset(conn, self.group, mq.topic, mq.queue_id, offset)
        except Exception as exc:
            log.warning("persisting offset %d of %s failed: %s", offset, mq, exc)
        else:
            pair = (mq.broker_name, mq.topic)
            self._committed[pair] = conn
            self._first_commits.pop(pair, None)

    async def persist_all(self, mqs: set[MessageQueue]) -> None:
        """All at once: one round trip for the lot, not one per queue (a lite-pull commit waits on it),
        but for the first commits that ``persist`` sends alone."""
        await asyncio.gather(*(self.persist(mq) for mq in list(self.table) if mq in mqs))


class LocalFileOffsetStore(_MemoryTable):
    """Broadcasting: offsets in ``<dir>/<clientId>/<group>/offsets.json`` in Java's fastjson layout."""

    def __init__(self, base_dir: Path, client_id: str, group: str) -> None:
        super().__init__()
        self.path = base_dir / client_id.replace(":", "_") / group / "offsets.json"
        self._loaded = False

    def load(self) -> None:
        for candidate in (self.path, self.path.with_name("offsets.json.bak")):
            try:
                data = jsonx.loads(candidate.read_bytes())
            except FileNotFoundError:
                continue
            except ValueError as exc:
                log.warning("offset file %s is damaged (%s), trying the backup", candidate, exc)
                continue
            for key, offset in (data.get("offsetTable") or {}).items():
                if isinstance(key, tuple) and key:
                    self.table[MessageQueue.from_json(dict(key))] = int(offset)
            break
        self._loaded = True

    async def read(self, mq: MessageQueue, mode: ReadMode) -> int:
        if not self._loaded:
            self.load()
        if mode is not ReadMode.STORE and mq in self.table:
            return self.table[mq]
        if mode is ReadMode.MEMORY:
            return NO_OFFSET
        self.load()
        return self.table.get(mq, NO_OFFSET)

    async def persist(self, mq: MessageQueue) -> None:
        await self.persist_all(set(self.table))

    async def persist_all(self, mqs: set[MessageQueue]) -> None:
        if not self.table:
            return
        table = {jsonx.object_key(**mq.to_json()): offset for mq, offset in self.table.items()}
        data = jsonx.dumps_object_keys({"offsetTable": table})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name("offsets.json.tmp")
        with open(tmp, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if self.path.exists():
            os.replace(self.path, self.path.with_name("offsets.json.bak"))
        os.replace(tmp, self.path)
