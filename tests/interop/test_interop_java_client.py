"""Apache RocketMQ's own Java client (rocketmq-client and rocketmq-tools 4.9.8) against ``tidemq server``:
DefaultMQProducer, DefaultMQPushConsumer, DefaultLitePullConsumer and DefaultMQAdminExt (what ``mqadmin``
runs), with messages crossing both ways between the Java client and tidemq's own clients.

Each JVM run does one role and prints JSON lines (tests/java_client_support.py); one tidemq server serves
the whole module."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.consumer_support import Collector, consumer, drain
from tests.java_client_support import JavaPeer, events
from tests.support import RawClient, ServerProcess, create_topic, eventually, run, unique
from tidemq.client import Message, Producer
from tidemq.client.admin import Admin
from tidemq.client.consumer import ConsumeFromWhere
from tidemq.record import MessageExt

pytestmark = [pytest.mark.e2e, pytest.mark.java_client]
FIRST = ConsumeFromWhere.FIRST_OFFSET


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    base = tmp_path_factory.mktemp("java-client")
    # Delay level 1 stays at Java's 1 s: the retry and delay tests wait on it.
    srv = ServerProcess(base / "data").start()
    yield srv
    srv.stop()


@pytest.fixture
def java(server: ServerProcess, tmp_path: Path) -> JavaPeer:
    return JavaPeer(server.namesrv, tmp_path / "java-home")


async def drain_queue(server: ServerProcess, topic: str, queue_id: int = 0) -> list[MessageExt]:
    c = await RawClient.open(server.broker)
    try:
        return await c.drain(topic, queue_id)
    finally:
        c.close()


async def dead_letters(server: ServerProcess, dlq: str) -> list[MessageExt]:
    """The messages of a DLQ topic once it has any (the consumer sends them back before it exits)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            msgs = await drain_queue(server, dlq)
        except AssertionError:
            msgs = []
        if msgs:
            return msgs
        await asyncio.sleep(0.2)
    return []


async def committed(server: ServerProcess, group: str, topic: str, total: int) -> None:
    """Until the group's committed offsets on ``topic`` add up to ``total`` (consumers commit every 5 s)."""
    async with Admin(server.namesrv) as admin:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                rows = (await admin.group_progress(group)).get(topic, [])
            except Exception:  # no offsets yet: the broker answers an error
                rows = []
            if sum(p.consumer_offset for p in rows) >= total:
                return
            await asyncio.sleep(0.3)
    raise AssertionError(f"{group} did not commit {total} offsets on {topic}")


def test_java_producer_every_send_mode_is_consumed_by_tidemq(server: ServerProcess, java: JavaPeer) -> None:
    topic = unique("JavaSends")
    run(create_topic(server.broker, topic))
    modes = "sync,async,oneway,batch,ordered,delay"
    produced = java.run("produce", topic=topic, mode=modes, count=4, shards=2, tag="TagJ")
    sent = events(produced, "sent")
    assert len(sent) == 5 * 4 + 1, produced.describe()  # a batch answers once for its 4 messages
    assert all(s.get("status", "SEND_OK") == "SEND_OK" for s in sent)
    # Java's unique ids (UNIQ_KEY) and the broker's offset ids, as the broker answered them.
    uniq = {s["body"]: s["msgId"] for s in sent if s["mode"] in ("sync", "async", "ordered", "delay")}
    batch = next(s for s in sent if s["mode"] == "batch")
    assert len(batch["msgId"].split(",")) == 4 and len(batch["offsetMsgId"].split(",")) == 4

    got = run(drain(server.namesrv, topic, 24))
    by_body = {m.body.decode(): m for m in got}
    assert sorted(by_body) == sorted(f"{mode}-{i}" for mode in modes.split(",") for i in range(4))
    assert len(got) == 24
    for body, msg_id in uniq.items():
        m = by_body[body]
        assert m.msg_id == msg_id, body
        assert m.tags == "TagJ" and m.properties["KEYS"] == f"jk-{body.rsplit('-', 1)[1]}"
        assert m.properties["idx"] == body.rsplit("-", 1)[1]
    for s in sent:
        if s["mode"] in ("sync", "ordered"):
            m = by_body[s["body"]]
            assert (m.queue_id, m.queue_offset) == (s["queueId"], s["queueOffset"]), s
            assert m.offset_msg_id == s["offsetMsgId"]
    # MessageQueueSelector: one queue per sharding key, in send order.
    ordered = [s for s in sent if s["mode"] == "ordered"]
    for shard in (0, 1):
        mine = [s for s in ordered if s["index"] % 2 == shard]
        assert len({s["queueId"] for s in mine}) == 1
        assert [s["queueOffset"] for s in mine] == sorted(s["queueOffset"] for s in mine)
    # Delay level 1 (1 s): stored back on the real topic no earlier than a second after it was born.
    for i in range(4):
        m = by_body[f"delay-{i}"]
        assert m.topic == topic and m.store_timestamp - m.born_timestamp >= 900


def test_java_compressed_body_round_trips_through_tidemq(server: ServerProcess, java: JavaPeer) -> None:
    """Java compresses bodies over 4 KiB; tidemq's consumer inflates them, and the reverse."""
    topic = unique("JavaBig")
    run(create_topic(server.broker, topic, 1))
    java.run("produce", topic=topic, count=1, body_size=6000, body_prefix="big-")
    big_py = b"py-big" + b"." * 9000

    async def scenario() -> list[MessageExt]:
        async with Producer(unique("PG"), server.namesrv) as producer:
            await producer.send(Message(topic, big_py, tags="TagA"))
        return await drain(server.namesrv, topic, 2)

    got = run(scenario())
    assert sorted(len(m.body) for m in got) == [6000, len(big_py)]
    assert any(m.body == b"big-0" + b"." * 5995 for m in got)
    pulled = java.run("litepull", topic=topic, group=unique("JG"), mode="subscribe", expect=2)
    bodies = {(r["body"], r["bodyLen"]) for r in events(pulled, "received")}
    assert bodies == {("big-0", 6000), ("py-big", len(big_py))}


async def send_ok_and_poison(namesrv: str, topic: str) -> None:
    """Four good messages (tag, key, a property each) and one the consumer is told to fail."""
    async with Producer(unique("PG"), namesrv) as producer:
        for i in range(4):
            await producer.send(
                Message(topic, b"ok-%d" % i, tags="TagA", keys=f"k{i}", properties={"n": str(i)})
            )
        await producer.send(Message(topic, b"poison-0", tags="TagA", keys="kp"))


def test_tidemq_messages_reach_a_java_push_consumer_through_retry_to_the_dlq(
    server: ServerProcess, java: JavaPeer
) -> None:
    """Concurrently: RECONSUME_LATER sends the message back (CONSUMER_SEND_MSG_BACK), it returns through
    %RETRY%group with its properties and reconsume count, and past max reconsume times lands in %DLQ%."""
    topic, group = unique("ToJava"), unique("JavaPush")
    run(create_topic(server.broker, topic))

    run(send_ok_and_poison(server.namesrv, topic))
    consumed = java.run(
        "consume",
        topic=topic,
        group=group,
        mode="concurrent",
        fail_first=100,
        fail_match="poison",
        max_reconsume=2,
        retry_delay_level=1,
        expect_deliveries=4 + 3,
    )
    got = events(consumed, "received")
    ok = {r["body"]: r for r in got if r["body"].startswith("ok-")}
    assert sorted(ok) == [f"ok-{i}" for i in range(4)]
    assert all(r["topic"] == topic and r["reconsumeTimes"] == 0 for r in ok.values())
    assert ok["ok-2"]["properties"]["n"] == "2" and ok["ok-2"]["keys"] == "k2"
    poison = [r for r in got if r["body"] == "poison-0"]
    assert [r["reconsumeTimes"] for r in poison] == [0, 1, 2], poison
    # Redeliveries come from the retry topic but Java shows them under the original topic.
    assert all(r["topic"] == topic for r in poison)
    assert poison[1]["properties"]["RETRY_TOPIC"] == topic
    assert poison[1]["properties"]["REAL_TOPIC"] == f"%RETRY%{group}"
    assert len({r["msgId"] for r in poison}) == 1

    dead = run(dead_letters(server, f"%DLQ%{group}"))
    assert [m.body for m in dead] == [b"poison-0"]
    assert dead[0].msg_id == poison[0]["msgId"] and dead[0].properties["KEYS"] == "kp"


def test_java_orderly_consumer_keeps_key_order_and_dead_letters_a_poison_message(
    server: ServerProcess, java: JavaPeer
) -> None:
    """Orderly: the queue is locked on the broker (LOCK_BATCH_MQ), a failing message is retried in place
    (SUSPEND_CURRENT_QUEUE_A_MOMENT) and, past max reconsume times, sent to %DLQ% by the client's inner
    producer through %RETRY%group while its queue goes on in order."""
    topic, group = unique("OrderToJava"), unique("JavaOrderly")
    run(create_topic(server.broker, topic))

    async def produce() -> None:
        async with Producer(unique("PG"), server.namesrv) as producer:
            for i in range(12):
                body = b"poison-%d" % i if i == 4 else b"m-%d" % i
                await producer.send(Message(topic, body), sharding_key=f"key-{i % 3}")

    run(produce())
    consumed = java.run(
        "consume",
        topic=topic,
        group=group,
        mode="orderly",
        fail_first=100,
        fail_match="poison",
        max_reconsume=2,
        expect_deliveries=11 + 3,
    )
    got = events(consumed, "received")
    by_key: dict[int, list[str]] = {}
    for r in got:
        if not r["failed"]:
            i = int(r["body"].rsplit("-", 1)[1])
            by_key.setdefault(i % 3, []).append(r["body"])
    assert by_key == {k: [f"m-{i}" for i in range(12) if i % 3 == k and i != 4] for k in range(3)}
    poison = [r for r in got if r["body"] == "poison-4"]
    assert [r["reconsumeTimes"] for r in poison] == [0, 1, 2]
    # Nothing after the poison message in its queue ran before the poison message gave up.
    after = [n for n, r in enumerate(got) if r["body"] in ("m-7", "m-10")]
    assert min(after) > max(n for n, r in enumerate(got) if r["body"] == "poison-4")

    assert [m.body for m in run(dead_letters(server, f"%DLQ%{group}"))] == [b"poison-4"]


def test_java_broadcasting_consumers_each_get_every_message(server: ServerProcess, java: JavaPeer) -> None:
    topic = unique("BcastToJava")
    run(create_topic(server.broker, topic))

    async def produce() -> None:
        async with Producer(unique("PG"), server.namesrv) as producer:
            for i in range(6):
                await producer.send(Message(topic, b"b-%d" % i))

    run(produce())
    consumed = java.run(
        "consume", topic=topic, group=unique("JavaBcast"), mode="broadcast", instances=2, expect=6
    )
    seen: dict[str, set[str]] = {}
    for r in events(consumed, "received"):
        seen.setdefault(r["instance"], set()).add(r["body"])
    assert len(seen) == 2 and all(bodies == {f"b-{i}" for i in range(6)} for bodies in seen.values())


def test_java_lite_pull_consumer_assign_seek_and_subscribe(server: ServerProcess, java: JavaPeer) -> None:
    topic = unique("LiteToJava")
    run(create_topic(server.broker, topic))

    async def produce() -> None:
        c = await RawClient.open(server.broker)
        try:
            for q in range(4):
                for i in range(3):
                    sent = await c.send(topic, b"q%d-%d" % (q, i), queue_id=q, tags="TagA")
                    assert sent.code == 0 and sent.queue_offset == i
        finally:
            c.close()

    run(produce())
    group = unique("JavaLiteAssign")
    assigned = java.run("litepull", topic=topic, group=group, mode="assign", before_seek=12, seek=1, expect=8)
    assert events(assigned, "assigned")[0]["queues"] == 4
    before = events(assigned, "received-before-seek")
    assert sorted(r["body"] for r in before) == sorted(f"q{q}-{i}" for q in range(4) for i in range(3))
    got = events(assigned, "received")
    assert sorted(r["body"] for r in got) == sorted(f"q{q}-{i}" for q in range(4) for i in (1, 2))
    assert all(r["queueOffset"] >= 1 for r in got)
    assert {r["queueId"]: r["offset"] for r in events(assigned, "committed")} == {q: 3 for q in range(4)}
    assert not events(assigned, "seek-illegal")
    # Java checks a seek against the broker's min and max offsets of the queue.
    past_end = java.run(
        "litepull", topic=topic, group=unique("JavaLiteSeek"), mode="assign", seek=4, expect=0
    )
    illegal = events(past_end, "seek-illegal")
    assert len(illegal) == 4 and "max offset = 3" in illegal[0]["error"], past_end.describe()

    subscribed = java.run("litepull", topic=topic, group=unique("JavaLiteSub"), mode="subscribe", expect=12)
    assert len({r["body"] for r in events(subscribed, "received")}) == 12


def test_mqadmin_calls_answer_about_tidemq_clients(server: ServerProcess, java: JavaPeer) -> None:
    """DefaultMQAdminExt, as mqadmin: cluster and topic listing, routes, stats, updateTopic on every
    master, progress and connections of an online tidemq consumer group (through the broker asking the
    client for its running info), and messages by offset id, unique key and key."""
    topic, group, created = unique("AdminJava"), unique("PyGroup"), unique("AdminCreated")
    run(create_topic(server.broker, topic))

    async def scenario() -> None:
        async with Producer(unique("PG"), server.namesrv) as producer:
            results = [
                await producer.send(Message(topic, b"a-%d" % i, tags="TagA", keys=[f"key-{i}", "shared"]))
                for i in range(6)
            ]
        got = Collector()
        c = consumer(server.namesrv, group, topic, got, consume_from_where=FIRST)
        await c.start()
        try:
            await eventually(lambda: len(got.distinct()) == 6, timeout=30, what="six messages")
            await committed(server, group, topic, 6)
            first = results[0]
            calls = [
                "clusterList",
                f"updateTopic:{created}:3",
                "topicList",
                f"topicRoute:{created}",
                f"topicRoute:{topic}",
                f"topicStatus:{topic}",
                f"consumerConnection:{group}",
                f"consumerProgress:{group}",
                f"queryMsgById:{topic}:{first.offset_msg_id}",
                f"queryMsgById:{topic}:{first.msg_id}",
                f"queryMsgByKey:{topic}:shared",
                "topicRoute:NoSuchTopicHere",
                "consumerConnection:NoSuchGroupHere",
            ]
            answers = await asyncio.to_thread(java.admin, *calls)
        finally:
            await c.shutdown()
        first = results[0]
        ok = {call: a["result"] for call, a in answers.items() if a["ok"]}

        cluster = ok["clusterList"]
        assert cluster["clusters"] == {"DefaultCluster": ["broker-a"]}
        assert cluster["brokers"]["broker-a"]["addrs"] == {"0": server.broker}
        assert {topic, created, f"%RETRY%{group}"} <= set(ok["topicList"])
        assert ok[f"updateTopic:{created}:3"] == [server.broker]
        assert ok[f"topicRoute:{created}"]["queues"] == [
            {"brokerName": "broker-a", "read": 3, "write": 3, "perm": 6, "topicSysFlag": 0}
        ]
        route = ok[f"topicRoute:{topic}"]
        assert route["brokers"] == [
            {"cluster": "DefaultCluster", "brokerName": "broker-a", "addrs": {"0": server.broker}}
        ]
        status = ok[f"topicStatus:{topic}"]
        assert len(status) == 4 and sum(q["max"] for q in status) == 6
        assert all(q["min"] == 0 and (q["lastUpdate"] > 0) == (q["max"] > 0) for q in status)

        conn = ok[f"consumerConnection:{group}"]
        assert len(conn["connections"]) == 1 and conn["connections"][0]["version"] == 409
        assert conn["messageModel"] == "CLUSTERING" and conn["consumeType"] == "CONSUME_PASSIVELY"
        assert conn["consumeFromWhere"] == "CONSUME_FROM_FIRST_OFFSET"
        assert conn["subscriptions"][topic]["subString"] == "*"
        client_id = conn["connections"][0]["clientId"]

        progress = ok[f"consumerProgress:{group}"]
        mine = [q for q in progress["queues"] if q["topic"] == topic]
        assert len(mine) == 4 and sum(q["brokerOffset"] for q in mine) == 6
        assert progress.get("allocationError") is None, progress
        assert {k for k, v in progress["allocation"].items() if v == client_id} >= {
            f"{topic}/broker-a/{q}" for q in range(4)
        }

        for call in (f"queryMsgById:{topic}:{first.offset_msg_id}", f"queryMsgById:{topic}:{first.msg_id}"):
            found = ok[call]
            assert found["body"] == "a-0" and found["offsetMsgId"] == first.offset_msg_id, call
            assert found["msgId"] == first.msg_id and found["keys"] == "key-0 shared"
            assert found["storeHost"] == f"/{server.broker}"
            # mqadmin's message track: which groups consume the topic and whether they got it.
            assert [(t["group"], t["trackType"]) for t in found.get("tracks", [])] == [(group, "CONSUMED")], (
                found
            )
        assert sorted(m["body"] for m in ok[f"queryMsgByKey:{topic}:shared"]) == [f"a-{i}" for i in range(6)]

        for call in ("topicRoute:NoSuchTopicHere", "consumerConnection:NoSuchGroupHere"):
            missing = answers[call]
            assert not missing["ok"] and missing["code"] == 17, (
                missing
            )  # TOPIC_NOT_EXIST from the name server
            assert "No topic route info in name server for the topic" in missing["error"]

        # The group once its consumer is gone: not online, and its track says so.
        gone = await asyncio.to_thread(
            java.admin, f"consumerConnection:{group}", f"queryMsgById:{topic}:{first.msg_id}"
        )
        offline = gone[f"consumerConnection:{group}"]
        assert not offline["ok"] and offline["code"] == 206, offline
        assert f"the consumer group[{group}] not online" in offline["error"]
        tracks = gone[f"queryMsgById:{topic}:{first.msg_id}"]["result"]["tracks"]
        assert tracks == [
            {
                "group": group,
                "trackType": "NOT_ONLINE",
                "exception": f"CODE:206 DESC:the consumer group[{group}] not online",
            }
        ]

    run(scenario())
