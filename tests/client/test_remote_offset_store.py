"""The clustering offset store against a broker that loses racing first commits, as Apache RocketMQ's does.

Apache RocketMQ's ConsumerOffsetManager creates a group's offset table of a topic on its first commit
with a get, then a put, and no lock; its commit requests run on a thread pool, so two first commits
arriving together can leave only one of them. A 4.9.7 cluster lost a queue's offset that way when a
consumer persisted all its queues at once on shutdown.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from tidemq.client.config import ClientConfig
from tidemq.client.consumer.offset_store import RemoteBrokerOffsetStore
from tidemq.client.instance import ClientInstance
from tidemq.client.message_queue import MessageQueue
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.route import MASTER_ID
from tidemq.remoting.transport import RemotingConnection, RemotingServer

GROUP = "G"


class UnlockedOffsetTables:
    """UPDATE_CONSUMER_OFFSET as the Java broker runs it: the table a first commit creates is published
    only after that commit's put, and meanwhile another commit may start a table of its own."""

    def __init__(self, refuse_first: int = 0) -> None:
        self.tables: dict[str, dict[int, int]] = {}
        self.commits = 0
        self.refuse_first = refuse_first

    async def __call__(self, conn: RemotingConnection, request: RemotingCommand) -> RemotingCommand:
        assert request.code == RequestCode.UPDATE_CONSUMER_OFFSET
        self.commits += 1
        if self.commits <= self.refuse_first:
            return request.response(ResponseCode.SYSTEM_BUSY, "busy")
        ext = request.ext_fields
        key = f"{ext['topic']}@{ext['consumerGroup']}"
        queue_id, offset = int(ext["queueId"]), int(ext["commitOffset"])
        table = self.tables.get(key)
        if table is None:
            table = {queue_id: offset}
            await asyncio.sleep(0.05)  # another commit runs on another thread meanwhile
            self.tables[key] = table
        else:
            table[queue_id] = offset
        return request.response(ResponseCode.SUCCESS)


@asynccontextmanager
async def _store_on(brokers: dict[str, UnlockedOffsetTables]) -> AsyncIterator[RemoteBrokerOffsetStore]:
    servers = [RemotingServer(tables, "127.0.0.1", 0) for tables in brokers.values()]
    for server in servers:
        await server.start()
    instance = ClientInstance(ClientConfig(namesrv_addr="127.0.0.1:1"))
    for name, server in zip(brokers, servers, strict=True):
        instance.brokers[name] = {MASTER_ID: f"127.0.0.1:{server.port}"}
    try:
        yield RemoteBrokerOffsetStore(instance, GROUP)
    finally:
        await instance.close()
        for server in servers:
            await server.close()


async def test_first_commits_of_a_topic_are_not_lost_to_a_racing_broker() -> None:
    brokers = {name: UnlockedOffsetTables() for name in ("broker-a", "broker-b")}
    queues = [MessageQueue(t, b, q) for t in ("T", "U") for b in brokers for q in range(4)]
    async with _store_on(brokers) as store:
        for mq in queues:
            store.update(mq, 10 + mq.queue_id)
        await store.persist_all(set(queues))
        for name, tables in brokers.items():
            assert tables.tables == {f"{t}@{GROUP}": {q: 10 + q for q in range(4)} for t in ("T", "U")}, name

        # Later commits find the tables made: every one is kept.
        for mq in queues:
            store.update(mq, 20 + mq.queue_id)
        await store.persist_all(set(queues[:6]))
        assert brokers["broker-a"].tables[f"T@{GROUP}"] == {q: 20 + q for q in range(4)}
        assert brokers["broker-b"].tables[f"T@{GROUP}"] == {0: 20, 1: 21, 2: 12, 3: 13}
        assert sum(tables.commits for tables in brokers.values()) == len(queues) + 6


async def test_after_a_refused_first_commit_the_next_one_still_goes_alone() -> None:
    """A first commit the broker refuses leaves no table: the next commit of the topic is the first."""
    tables = UnlockedOffsetTables(refuse_first=1)
    queues = [MessageQueue("T", "broker-a", q) for q in range(4)]
    async with _store_on({"broker-a": tables}) as store:
        for mq in queues:
            store.update(mq, 10 + mq.queue_id)
        await store.persist_all(set(queues))
        assert tables.tables == {f"T@{GROUP}": {1: 11, 2: 12, 3: 13}}  # queue 0 went first, refused
        await store.persist_all(set(queues))
        assert tables.tables == {f"T@{GROUP}": {q: 10 + q for q in range(4)}}


async def test_a_queue_persisted_alone_waits_for_the_first_commit_too() -> None:
    """A queue a rebalance drops persists on its own, maybe beside the periodic persist of them all."""
    tables = UnlockedOffsetTables()
    queues = [MessageQueue("T", "broker-a", q) for q in range(4)]
    async with _store_on({"broker-a": tables}) as store:
        for mq in queues:
            store.update(mq, 10 + mq.queue_id)
        await asyncio.gather(store.persist_all(set(queues[:3])), store.persist(queues[3]))
        assert tables.tables == {f"T@{GROUP}": {q: 10 + q for q in range(4)}}


async def test_a_broker_behind_a_new_connection_gets_its_first_commits_alone_again() -> None:
    """A restarted broker (or a new master after a failover) may have no table for the topic, whatever
    this store committed before: the first commit over the new connection goes alone again."""
    queues = [MessageQueue("T", "broker-a", q) for q in range(4)]
    async with _store_on({"broker-a": UnlockedOffsetTables()}) as store:
        for mq in queues:
            store.update(mq, 10 + mq.queue_id)
        await store.persist_all(set(queues))
        fresh = UnlockedOffsetTables()
        server = RemotingServer(fresh, "127.0.0.1", 0)
        await server.start()
        try:
            store.instance.brokers["broker-a"] = {MASTER_ID: f"127.0.0.1:{server.port}"}
            for mq in queues:
                store.update(mq, 20 + mq.queue_id)
            await store.persist_all(set(queues))
            assert fresh.tables == {f"T@{GROUP}": {q: 20 + q for q in range(4)}}
        finally:
            await server.close()
