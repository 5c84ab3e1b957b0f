"""One topic, both RocketMQ protocols: what the official 5.x Python SDK sends over gRPC is consumed by
tidemq's remoting push consumer and by the Java 4.9.8 client's push consumer, and what tidemq's remoting
producer and the Java 4.9.8 producer send is received by the SDK's SimpleConsumer, with tags, keys, user
properties, the message id (a gRPC consumer's message id is the remoting msgId, the UNIQ_KEY), a delayed
message and a FIFO message group (the ``__SHARDINGKEY`` property) intact both ways."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.consumer_support import Collector, consumer, drain
from tests.grpc.test_grpc_consumer import SdkConsumer, create_group
from tests.grpc.test_grpc_endpoint import sdk_send
from tests.java_client_support import JavaPeer, events
from tests.support import ServerProcess, create_topic, eventually, unique
from tidemq.client import Message, Producer
from tidemq.client.consumer import ConsumeFromWhere

pytestmark = pytest.mark.e2e


def sdk_spec(deliver_at_s: int) -> list[dict[str, Any]]:
    """A plain message with a tag, a key and user properties, a FIFO message group of three, a delayed one."""
    return [
        {"body": "plain", "tag": "TagA", "key": "order-1", "props": {"color": "red", "n": "7"}},
        *({"body": f"fifo-{i}", "tag": "TagF", "group": "g1"} for i in range(3)),
        {"body": "later", "tag": "TagD", "deliver_at_s": deliver_at_s},
    ]


@pytest.fixture
def sdk_sent(server: ServerProcess) -> Iterator[tuple[str, int, dict[str, str]]]:
    """A fresh 2-queue topic the SDK sent ``sdk_spec`` to: the topic, the delivery time, body -> id."""
    topic = unique("xp")
    asyncio.run(create_topic(server.broker, topic, 2, routed_by=server.namesrv))
    deliver_at_s = int(time.time()) + 3
    spec = sdk_spec(deliver_at_s)
    receipts = sdk_send(server.grpc, topic, spec)
    assert [r["ok"] for r in receipts] == [True] * len(spec), receipts
    yield topic, deliver_at_s, {item["body"]: r["message_id"] for item, r in zip(spec, receipts, strict=True)}


async def test_sdk_messages_reach_tidemq_push_consumer(
    server: ServerProcess, sdk_sent: tuple[str, int, dict[str, str]]
) -> None:
    topic, deliver_at_s, ids = sdk_sent
    collector = Collector()
    c = consumer(
        server.namesrv,
        unique("XPush"),
        topic,
        collector,
        orderly=True,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
    )
    await c.start()
    try:
        await eventually(lambda: len(collector.distinct()) >= 5, timeout=30, what="all five consumed")
    finally:
        await c.shutdown()
    by_body = {m.body.decode(): m for m in collector.deliveries}
    assert {body: m.msg_id for body, m in by_body.items()} == ids  # msgId = UNIQ_KEY = the SDK's id
    plain = by_body["plain"]
    assert (plain.tags, plain.keys) == ("TagA", "order-1")
    assert (plain.properties["color"], plain.properties["n"]) == ("red", "7")
    fifo = [m for m in collector.deliveries if m.body.startswith(b"fifo-")]
    assert [m.body for m in fifo] == [b"fifo-0", b"fifo-1", b"fifo-2"]  # one queue, its order
    assert len({m.queue_id for m in fifo}) == 1 and {m.properties["__SHARDINGKEY"] for m in fifo} == {"g1"}
    later = by_body["later"]
    assert later.tags == "TagD" and later.store_timestamp >= deliver_at_s * 1000


@pytest.mark.java_client
async def test_sdk_messages_reach_java_push_consumer(
    server: ServerProcess, sdk_sent: tuple[str, int, dict[str, str]], tmp_path: Path
) -> None:
    topic, deliver_at_s, ids = sdk_sent
    java = JavaPeer(server.namesrv, tmp_path / "java-home")
    args = ("--topic", topic, "--group", unique("XJava"), "--mode", "orderly", "--expect", "5")
    result = await asyncio.to_thread(java.run, "consume", *args, "--timeout", "60")
    got = events(result, "received")
    by_body = {r["body"]: r for r in got}
    assert {body: r["msgId"] for body, r in by_body.items()} == ids
    plain = by_body["plain"]
    assert (plain["tags"], plain["keys"]) == ("TagA", "order-1")
    assert (plain["properties"]["color"], plain["properties"]["n"]) == ("red", "7")
    fifo = [r for r in got if r["body"].startswith("fifo-")]
    assert [r["body"] for r in fifo] == ["fifo-0", "fifo-1", "fifo-2"]
    assert len({r["queueId"] for r in fifo}) == 1
    assert {r["properties"]["__SHARDINGKEY"] for r in fifo} == {"g1"}
    assert by_body["later"]["storeTimestamp"] >= deliver_at_s * 1000


def receive_acking(c: SdkConsumer, count: int, timeout: float = 40) -> list[tuple[dict[str, Any], int]]:
    """One message at a time (a FIFO group holds a queue's next one until this one is acked), each with
    the wall-clock millisecond it arrived."""
    got: list[tuple[dict[str, Any], int]] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        for msg in c.receive(1, 30)[0]:
            got.append((msg, int(time.time() * 1000)))
            assert c.ack([msg]) == ["ok"]
    return got


async def test_tidemq_producer_messages_reach_sdk_simple_consumer(server: ServerProcess) -> None:
    topic, group = unique("xp"), unique("XFifo")
    await create_topic(server.broker, topic, 2, routed_by=server.namesrv)
    await create_group(server.broker, group, consumeMessageOrderly=True)
    sdk = SdkConsumer(server.grpc, group, topic)
    try:
        async with Producer(unique("PG"), server.namesrv) as producer:
            plain = Message(topic, b"plain", tags="TagA", keys=["k1", "k2"], properties={"color": "red"})
            sent = {"plain": await producer.send(plain)}
            for i in range(3):  # a 5.x message group: the sharding key property, one queue
                msg = Message(topic, f"fifo-{i}".encode(), tags="TagF", properties={"__SHARDINGKEY": "g1"})
                sent[f"fifo-{i}"] = await producer.send(msg, sharding_key="g1")
            sent_at_ms = int(time.time() * 1000)
            delayed = Message(topic, b"later", tags="TagD")
            sent["later"] = await producer.send(delayed, delay=timedelta(seconds=3))
        got = await asyncio.to_thread(receive_acking, sdk, 5)
    finally:
        sdk.close()
    by_body = {m["body"]: (m, at) for m, at in got}
    assert {body: m["message_id"] for body, (m, _) in by_body.items()} == {
        body: r.msg_id for body, r in sent.items()
    }
    plain_got = by_body["plain"][0]
    assert plain_got["tag"] == "TagA" and plain_got["keys"] == ["k1", "k2"]
    assert plain_got["properties"] == {"color": "red"} and plain_got["message_group"] is None
    fifo = [m for m, _ in got if m["body"].startswith("fifo-")]
    assert [m["body"] for m in fifo] == ["fifo-0", "fifo-1", "fifo-2"]
    assert {m["message_group"] for m in fifo} == {"g1"} and "__SHARDINGKEY" not in fifo[0]["properties"]
    later, arrived = by_body["later"]
    assert later["tag"] == "TagD" and later["delivery_timestamp"] >= sent_at_ms + 3000
    assert arrived >= later["delivery_timestamp"]


@pytest.mark.java_client
async def test_java_producer_messages_reach_sdk_simple_consumer(
    server: ServerProcess, tmp_path: Path
) -> None:
    topic, group = unique("xp"), unique("XJFifo")
    await create_topic(server.broker, topic, 2, routed_by=server.namesrv)
    await create_group(server.broker, group, consumeMessageOrderly=True)
    java = JavaPeer(server.namesrv, tmp_path / "java-home")
    args = ("--topic", topic, "--mode", "sync,ordered,delay", "--count", "3", "--shards", "1")
    result = await asyncio.to_thread(
        java.run, "produce", *args, "--tag", "TagJ", "--props", "color=red", "--delay-level", "1"
    )
    sent = {r["body"]: r["msgId"] for r in events(result, "sent")}
    assert len(sent) == 9, result.describe()
    sdk = SdkConsumer(server.grpc, group, topic)
    try:
        got = await asyncio.to_thread(receive_acking, sdk, 9)
    finally:
        sdk.close()
    assert {m["body"]: m["message_id"] for m, _ in got} == sent
    for m, _ in got:
        i = m["body"].rsplit("-", 1)[1]
        assert m["tag"] == "TagJ" and m["keys"] == [f"jk-{i}"], m
        assert m["properties"]["idx"] == i and m["properties"]["color"] == "red", m
    # A 4.x orderly send picks the queue itself and names no message group: the queue's order holds.
    ordered = [m for m, _ in got if m["body"].startswith("ordered-")]
    assert [m["body"] for m in ordered] == ["ordered-0", "ordered-1", "ordered-2"]
    assert {m["message_group"] for m in ordered} == {None}
    # Delay level 1 (1 s) held each delayed one back before any consumer could see it.
    stored = {m.body.decode(): m for m in await drain(server.namesrv, topic, expect=9)}
    assert all(
        stored[f"delay-{i}"].store_timestamp - stored[f"delay-{i}"].born_timestamp >= 1000 for i in range(3)
    )
