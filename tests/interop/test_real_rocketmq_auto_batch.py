"""Producer auto-batching against a real Apache RocketMQ 5.3.3 cluster: the batch requests it builds are
ones a Java broker stores message by message, and the per-message results match what was stored."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.consumer_support import drain
from tests.rocketmq_cluster import JavaCluster, create_topic, java_cluster
from tests.support import unique
from tidemq.client import Message, Producer

pytestmark = [pytest.mark.e2e, pytest.mark.java_broker]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JavaCluster]:
    yield from java_cluster("5.3.3", tmp_path_factory.mktemp("rocketmq-auto-batch"))


async def test_auto_batched_sends_resolve_with_what_the_java_broker_stored(cluster: JavaCluster) -> None:
    topic = unique("AutoBatch")
    await create_topic(cluster, topic)
    async with Producer(unique("PG"), cluster.namesrv, auto_batch=True) as producer:
        await producer.queues_for(topic)
        futures = [
            producer.send_async(Message(topic, b"m%d" % i, tags="t", keys=f"k{i}")) for i in range(100)
        ]
        results = await asyncio.gather(*futures)
    assert len({r.msg_id for r in results}) == 100 and len({r.offset_msg_id for r in results}) == 100
    got = {m.msg_id: m for m in await drain(cluster.namesrv, topic, 100)}
    for i, r in enumerate(results):
        stored = got[r.msg_id]
        assert stored.body == b"m%d" % i and stored.tags == "t" and stored.keys == f"k{i}"
        assert (stored.offset_msg_id, stored.queue_id, stored.queue_offset) == (
            r.offset_msg_id,
            r.message_queue.queue_id,
            r.queue_offset,
        )
