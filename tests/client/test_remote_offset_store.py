"""The clustering offset store against a broker that loses racing first commits, as Apache RocketMQ's does.

Apache RocketMQ's ConsumerOffsetManager creates a group's offset table of a topic on its first commit
with a get, then a put, and no lock; its commit requests run on a thread pool, so two first commits
arriving together can leave only one of them. A 4.9.7 cluster lost a queue's offset that way when a
consumer persisted all its queues at once on shutdown.
"""

from __future__ import annotations

import asyncio

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

    def __init__(self) -> None:
        self.tables: dict[str, dict[int, int]] = {}
        self.commits = 0

    async def __call__(self, conn: RemotingConnection, request: RemotingCommand) -> RemotingCommand:
        assert request.code == RequestCode.UPDATE_CONSUMER_OFFSET
        self.commits += 1
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


async def test_first_commits_of_a_topic_are_not_lost_to_a_racing_broker() -> None:
    brokers = {name: UnlockedOffsetTables() for name in ("broker-a", "broker-b")}
    servers = [RemotingServer(tables, "127.0.0.1", 0) for tables in brokers.values()]
    for server in servers:
        await server.start()
    instance = ClientInstance(ClientConfig(namesrv_addr="127.0.0.1:1"))
    for name, server in zip(brokers, servers, strict=True):
        instance.brokers[name] = {MASTER_ID: f"127.0.0.1:{server.port}"}
    store = RemoteBrokerOffsetStore(instance, GROUP)
    queues = [MessageQueue(t, b, q) for t in ("T", "U") for b in brokers for q in range(4)]
    try:
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
    finally:
        await instance.close()
        for server in servers:
            await server.close()
