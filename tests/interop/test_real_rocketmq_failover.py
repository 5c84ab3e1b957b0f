"""A real two-broker Apache RocketMQ cluster losing a broker under load: tidemq's producer goes on sending
to the other one, a consumer group goes on consuming, and once the killed broker is back (SYNC_FLUSH) every
acknowledged message has been consumed at least once."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator

import pytest

from tests.consumer_support import Collector, consumer
from tests.rocketmq_cluster import VERSIONS, JavaCluster, create_topic, java_cluster
from tests.support import eventually, unique
from tidemq.client import Message, Producer
from tidemq.client.config import ClientConfig
from tidemq.client.consumer import ConsumeFromWhere
from tidemq.client.instance import MQClientError
from tidemq.remoting.transport import RemotingError

pytestmark = [pytest.mark.e2e, pytest.mark.java_broker]
SENDS = 600
SEND_WINDOW_S = 60.0
CONSUME_TIMEOUT_S = 150.0


@pytest.fixture(params=VERSIONS)
def sync_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JavaCluster]:
    yield from java_cluster(request.param, tmp_path_factory.mktemp(f"sync-{request.param}"), "SYNC_FLUSH")


async def test_broker_killed_under_load_loses_nothing_acknowledged(sync_cluster: JavaCluster) -> None:
    cluster = sync_cluster
    topic, group = unique("Failover"), unique("FailoverGroup")
    # Routes refreshed every 2 s instead of 30 s, so the test does not wait out Java's default period.
    fast = ClientConfig(namesrv_addr=cluster.namesrv, poll_name_server_interval_s=2.0)

    await create_topic(cluster, topic)
    got = Collector()
    members = [
        consumer(
            cluster.namesrv,
            group,
            topic,
            got,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
            config=fast,
        )
        for _ in range(2)
    ]
    for c in members:
        await c.start()
    acked: dict[bytes, str] = {}
    failed = 0
    victim = cluster.broker("broker-a")
    try:
        async with Producer(unique("PG"), config=fast, send_timeout=3.0) as producer:
            deadline = time.monotonic() + SEND_WINDOW_S
            for i in range(SENDS):
                if time.monotonic() > deadline:
                    break
                if i == SENDS // 4:
                    assert victim.process.proc is not None
                    os.kill(victim.process.proc.pid, signal.SIGKILL)
                    victim.process.proc.wait(10)
                body = b"f%d" % i
                try:
                    result = await producer.send(Message(topic, body))
                except (MQClientError, RemotingError, OSError):
                    failed += 1
                    continue
                acked[body] = result.message_queue.broker_name
                await asyncio.sleep(0.005)
        after_kill = [b for b, broker in acked.items() if int(b[1:]) > SENDS // 4]
        assert len(after_kill) >= SENDS // 2, f"only {len(after_kill)} sends acknowledged after the kill"
        assert all(acked[b] == "broker-b" for b in after_kill[-50:]), "sends went on to broker-b"
        assert failed <= 5, f"{failed} sends failed outright"
        # broker-b's messages are consumed while broker-a is down ...
        on_b = {b for b, broker in acked.items() if broker == "broker-b"}
        await eventually(
            lambda: on_b <= got.distinct(), timeout=CONSUME_TIMEOUT_S, what="broker-b's messages"
        )
        # ... and broker-a's once it is back, from its own SYNC_FLUSH'ed log
        await asyncio.to_thread(cluster.restart_broker, "broker-a")
        await eventually(
            lambda: set(acked) <= got.distinct(),
            timeout=CONSUME_TIMEOUT_S,
            what=f"every acknowledged message ({len(set(acked) - got.distinct())} missing)",
        )
    finally:
        for c in members:
            await c.shutdown()
