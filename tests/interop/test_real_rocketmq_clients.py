"""tidemq's Python clients against real Apache RocketMQ clusters (a name server and two master brokers of
each generation in ``tests.rocketmq_cluster.VERSIONS``): what works against ``tidemq server`` must work
against the brokers users move to."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.consumer_support import Collector, check_property_rules, consumer, drain, property_rules_scenario
from tests.rocketmq_cluster import VERSIONS, JavaCluster, create_topic, java_cluster
from tests.support import eventually, run, tidemq_cli, unique
from tidemq.client import (
    BlockingLitePullConsumer,
    BlockingProducer,
    BlockingPushConsumer,
    ConsumeStatus,
    Message,
    MessageQueue,
    Producer,
)
from tidemq.client.admin import Admin
from tidemq.client.config import ClientConfig
from tidemq.client.consumer import ConsumeFromWhere, MessageModel
from tidemq.client.consumer.lite_pull import LitePullConsumer
from tidemq.record import MessageExt

pytestmark = [pytest.mark.e2e, pytest.mark.java_broker]
FIRST = ConsumeFromWhere.FIRST_OFFSET


@pytest.fixture(scope="session", params=VERSIONS)
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JavaCluster]:
    yield from java_cluster(request.param, tmp_path_factory.mktemp(f"rocketmq-{request.param}"))


async def test_producer_every_send_kind_arrives_as_sent(cluster: JavaCluster) -> None:
    topic = unique("Sends")

    await create_topic(cluster, topic)
    async with Producer(unique("PG"), cluster.namesrv) as producer:
        sync = await producer.send(
            Message(topic, b"sync", tags="t1", keys=["k1", "k2"], properties={"color": "blue"})
        )
        assert sync.status.value == "SEND_OK" and sync.message_queue.broker_name in (
            "broker-a",
            "broker-b",
        )
        done: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        producer.send_async(Message(topic, b"async"), callback=lambda r, e: done.set_result(e or r))
        assert not isinstance(await asyncio.wait_for(done, 10), BaseException)
        await producer.send_oneway(Message(topic, b"oneway"))
        batch = await producer.send_batch([Message(topic, b"batch%d" % i, tags="b") for i in range(10)])
        assert batch.status.value == "SEND_OK"
        ordered = [
            await producer.send(Message(topic, b"order%d" % i), sharding_key="order-7") for i in range(5)
        ]
        assert len({(r.message_queue.broker_name, r.message_queue.queue_id) for r in ordered}) == 1
        assert [r.queue_offset for r in ordered] == sorted(r.queue_offset for r in ordered)
        big = os.urandom(3000) * 4  # 12 KiB: compressed on the wire, whole again when consumed
        await producer.send(Message(topic, big, tags="big"))
        sent_delayed = time.time()
        await producer.send(Message(topic, b"delayed", delay_level=1))
    got = await drain(cluster.namesrv, topic, 20)
    by_body = {m.body: m for m in got}
    assert len(got) == 20, sorted(by_body)
    assert by_body[b"sync"].tags == "t1" and by_body[b"sync"].properties["color"] == "blue"
    assert by_body[b"sync"].properties["KEYS"] == "k1 k2"
    assert by_body[b"sync"].msg_id == sync.msg_id
    assert {b"async", b"oneway", big} <= set(by_body)
    assert by_body[big].tags == "big"
    orders = [m for m in got if m.body.startswith(b"order")]
    assert [m.body for m in sorted(orders, key=lambda m: m.queue_offset)] == [
        b"order%d" % i for i in range(5)
    ]
    delayed = by_body[b"delayed"]
    assert delayed.topic == topic and delayed.store_timestamp / 1000 >= sent_delayed + 0.5


async def test_push_consumer_failures_go_through_the_real_retry_topic_to_the_dlq(
    cluster: JavaCluster,
) -> None:
    topic, group = unique("Retry"), unique("RetryGroup")

    await create_topic(cluster, topic)
    got = Collector(fail=lambda m: m.body == b"poison")
    c = consumer(cluster.namesrv, group, topic, got, consume_from_where=FIRST, max_reconsume_times=2)
    await c.start()
    try:
        async with Producer(unique("PG"), cluster.namesrv) as producer:
            for i in range(10):
                await producer.send(Message(topic, b"ok%d" % i))
            await producer.send(Message(topic, b"poison"))
        await eventually(
            lambda: got.bodies.count(b"poison") == 3 and len(got.distinct()) == 11,
            timeout=60,
            what="the ten good messages, and the poison one with its 2 redeliveries",
        )
    finally:
        await c.shutdown()
    dead = await drain(cluster.namesrv, f"%DLQ%{group}", 1, timeout=30)
    assert [m.body for m in dead] == [b"poison"]
    assert all(got.bodies.count(b"ok%d" % i) == 1 for i in range(10))


async def test_orderly_consumer_keeps_each_queue_in_order_under_the_broker_locks(
    cluster: JavaCluster,
) -> None:
    topic, group = unique("Orderly"), unique("OrderlyGroup")

    await create_topic(cluster, topic)
    async with Producer(unique("PG"), cluster.namesrv) as producer:
        for i in range(60):
            await producer.send(Message(topic, b"%d:%d" % (i % 6, i)), sharding_key=f"key-{i % 6}")
    got = Collector()
    members = [
        consumer(cluster.namesrv, group, topic, got, orderly=True, consume_from_where=FIRST) for _ in range(2)
    ]
    for c in members:
        await c.start()
    try:
        await eventually(lambda: len(got.distinct()) == 60, timeout=60, what="60 messages")
    finally:
        for c in members:
            await c.shutdown()
    per_key: dict[bytes, list[int]] = {}
    for body in got.bodies:
        key, seq = body.split(b":")
        per_key.setdefault(key, []).append(int(seq))
    for key, seqs in per_key.items():
        assert seqs == sorted(seqs), f"key {key!r} out of order: {seqs}"


async def test_broadcasting_consumers_each_get_every_message(cluster: JavaCluster, tmp_path: Path) -> None:
    topic, group = unique("Broadcast"), unique("BroadcastGroup")

    await create_topic(cluster, topic)
    seen = [Collector(), Collector()]
    members = [
        consumer(
            cluster.namesrv,
            group,
            topic,
            got,
            message_model=MessageModel.BROADCASTING,
            consume_from_where=FIRST,
            offset_store_dir=tmp_path / f"member{i}",
            # broadcasting keeps the instance name (its offsets file is named by it), as Java does
            config=ClientConfig(namesrv_addr=cluster.namesrv, instance_name=f"member{i}"),
        )
        for i, got in enumerate(seen)
    ]
    for c in members:
        await c.start()
    try:
        async with Producer(unique("PG"), cluster.namesrv) as producer:
            for i in range(20):
                await producer.send(Message(topic, b"b%d" % i))
        await eventually(lambda: all(len(s.distinct()) == 20 for s in seen), timeout=60, what="20 each")
    finally:
        for c in members:
            await c.shutdown()


async def test_lite_pull_consumer_assign_seek_and_commit(cluster: JavaCluster) -> None:
    topic, group = unique("LitePull"), unique("LiteGroup")

    await create_topic(cluster, topic, queues=2)
    async with Producer(unique("PG"), cluster.namesrv) as producer:
        sent = [await producer.send(Message(topic, b"l%d" % i)) for i in range(20)]
    queue = sent[0].message_queue
    in_queue = sorted(r.queue_offset for r in sent if r.message_queue == queue)
    c = LitePullConsumer(group, cluster.namesrv, auto_commit=False)
    await c.start()
    try:
        queues = await c.fetch_message_queues(topic)
        assert {(q.broker_name, q.queue_id) for q in queues} == {
            (b, q) for b in ("broker-a", "broker-b") for q in range(2)
        }
        c.assign([MessageQueue(topic, queue.broker_name, queue.queue_id)])
        await c.seek(MessageQueue(topic, queue.broker_name, queue.queue_id), in_queue[1])
        got: list[MessageExt] = []
        deadline = time.monotonic() + 20
        while len(got) < len(in_queue) - 1 and time.monotonic() < deadline:
            got += await c.poll(1.0)
        assert [m.queue_offset for m in got] == in_queue[1:]
        await c.commit()
    finally:
        await c.shutdown()
    async with Admin(cluster.namesrv) as admin:
        progress = await admin.group_progress(group, topic)
    committed = {(p.broker_name, p.queue_id): p.consumer_offset for ps in progress.values() for p in ps}
    assert committed[(queue.broker_name, queue.queue_id)] == in_queue[-1] + 1


def test_blocking_facades(cluster: JavaCluster) -> None:
    topic = unique("Blocking")
    run(create_topic(cluster, topic))
    with BlockingProducer(unique("PG"), cluster.namesrv) as producer:
        for i in range(5):
            producer.send(Message(topic, b"x%d" % i))
    seen: list[bytes] = []

    def listener(msgs: list[MessageExt], ctx: object) -> ConsumeStatus:
        seen.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    push = BlockingPushConsumer(unique("BG"), cluster.namesrv, consume_from_where=FIRST)
    push.subscribe(topic)
    push.register_listener(listener)
    with push:
        deadline = time.monotonic() + 30
        while len(set(seen)) < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
    assert set(seen) == {b"x%d" % i for i in range(5)}
    pull = BlockingLitePullConsumer(unique("BL"), cluster.namesrv, consume_from_where=FIRST)
    pull.subscribe(topic)
    polled: list[MessageExt] = []
    with pull:
        deadline = time.monotonic() + 30
        while len(polled) < 5 and time.monotonic() < deadline:
            polled += pull.poll(1.0)
    assert {m.body for m in polled} == {b"x%d" % i for i in range(5)}


def test_cli_against_the_real_cluster(cluster: JavaCluster, tmp_path: Path) -> None:
    """Every client command of ``tidemq`` pointed at the Java name server ($NAMESRV_ADDR, as mqadmin)."""
    topic, group = unique("Cli"), unique("CliGroup")
    env = {**os.environ, "NAMESRV_ADDR": cluster.namesrv}

    def tidemq(*args: str, stdin: str | None = None) -> str:
        done = tidemq_cli(*args, stdin=stdin, timeout=120, env=env, cwd=tmp_path)
        assert done.returncode == 0, f"tidemq {' '.join(args)}: exit {done.returncode}\n{done.stderr[-3000:]}"
        return done.stdout

    created = tidemq("topic", "create", topic, "--queues", "2")
    assert "broker-a" in created and "broker-b" in created
    assert topic in tidemq("topic", "list").split()
    route = tidemq("topic", "route", topic)
    assert "broker-a" in route and "broker-b" in route
    lines = "".join(f"line {i}\n" for i in range(40))
    produced = tidemq("produce", "-t", topic, "--keys", "k-{i}", "--format", "json", stdin=lines)
    # in the order the acknowledgements came; "i" is the input line's number (from 0, as k-{i})
    sent = sorted((json.loads(row) for row in produced.splitlines()), key=lambda s: int(s["i"]))
    assert len(sent) == 40 and {s["broker"] for s in sent} == {"broker-a", "broker-b"}
    stats = tidemq("topic", "stats", topic)
    assert "broker-a" in stats and "broker-b" in stats
    consumed = tidemq(
        "consume",
        "-t",
        topic,
        "-g",
        group,
        "--from",
        "first",
        "-n",
        "40",
        "--timeout",
        "60",
        "--format",
        "json",
    )
    assert sorted(json.loads(row)["body"] for row in consumed.splitlines()) == sorted(
        f"line {i}" for i in range(40)
    )
    progress = tidemq("group", "progress", group)
    assert "total lag: 0" in progress
    by_unique_key = tidemq("message", "get", "--topic", topic, "--id", sent[3]["msg_id"])
    assert "line 3" in by_unique_key
    by_offset_id = tidemq("message", "get", "--id", sent[4]["offset_msg_id"])
    assert "line 4" in by_offset_id
    assert "line 5" in tidemq("message", "query", "--topic", topic, "--key", "k-5")


async def test_stored_properties_of_retries_dead_letters_delays_and_batches(cluster: JavaCluster) -> None:
    """What tests/broker/test_broker_consumers.py asks of tidemq server, checked against the real brokers."""
    topic, group = unique("PropRules"), unique("PropRulesGroup")

    await create_topic(cluster, topic, 1)
    deliveries, dlq = await property_rules_scenario(cluster.namesrv, topic, group)
    dead = await drain(cluster.namesrv, dlq, 1)
    check_property_rules(deliveries, dead, topic, group, plain_keeps_wait=cluster.major >= 5)
