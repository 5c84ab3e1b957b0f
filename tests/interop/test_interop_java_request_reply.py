"""Request-reply across Apache RocketMQ's own Java client (4.9.8) and tidemq: DefaultMQProducer.request
answered by a tidemq replier, tidemq's ``Producer.request`` answered by a Java replier using
MessageUtil.createReplyMessage, and the Java client's request timeout, all through ``tidemq server``
(docs/protocols/rocketmq-request-reply.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.consumer_support import consumer
from tests.java_client_support import JavaPeer, events
from tests.support import ServerProcess, create_topic, unique
from tidemq.client import Message, Producer
from tidemq.client.consumer import ConsumeContext, ConsumeFromWhere, ConsumeStatus
from tidemq.record import MessageExt, Prop

pytestmark = [pytest.mark.e2e, pytest.mark.java_client]
REPLY_TOPIC = "DefaultCluster_REPLY_TOPIC"


@pytest.fixture
def java(server: ServerProcess, tmp_path: Path) -> JavaPeer:
    return JavaPeer(server.namesrv, tmp_path / "java-home")


async def test_java_request_is_answered_by_a_tidemq_replier(server: ServerProcess, java: JavaPeer) -> None:
    """Bodies over 4 KiB: the Java request and the tidemq reply both travel compressed."""
    topic = unique("JavaReq")
    await create_topic(server.broker, topic, routed_by=server.namesrv)
    replier = Producer(unique("ReplierPG"), server.namesrv)
    await replier.start()
    requests: list[MessageExt] = []

    async def answer(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        for msg in msgs:
            requests.append(msg)
            await replier.reply(msg, b"re:" + msg.body)
        return ConsumeStatus.CONSUME_SUCCESS

    c = consumer(
        server.namesrv, unique("ReplierCG"), topic, answer, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    )
    await c.start()
    try:
        result = await asyncio.to_thread(
            java.run,
            "request",
            "--topic",
            topic,
            "--count",
            "3",
            "--pad",
            "5000",
            "--request-timeout-ms",
            "20000",
        )
    finally:
        await c.shutdown()
        await replier.shutdown()
    replies = events(result, "reply")
    assert [r["body"] for r in replies] == ["re:ask-0", "re:ask-1", "re:ask-2"], result.describe()
    for reply in replies:
        assert reply["topic"] == REPLY_TOPIC and reply["bodyLen"] == len("re:ask-0") + 5000
        assert reply["properties"]["CORRELATION_ID"] == reply["requestCorrelationId"]
        assert reply["properties"]["MSG_TYPE"] == "reply"
    sent = {m.properties[Prop.CORRELATION_ID]: m for m in requests}
    assert set(sent) == {r["requestCorrelationId"] for r in replies}
    first = next(iter(sent.values()))
    assert first.properties[Prop.TTL] == "20000" and "@" in first.properties[Prop.REPLY_TO_CLIENT]


async def test_tidemq_request_is_answered_by_a_java_replier(server: ServerProcess, java: JavaPeer) -> None:
    topic = unique("JavaReplies")
    await create_topic(server.broker, topic, routed_by=server.namesrv)
    java_replier = asyncio.create_task(
        asyncio.to_thread(
            java.run, "reply", "--topic", topic, "--group", unique("JavaReplierCG"), "--expect", "3"
        )
    )
    requester = Producer(unique("RequesterPG"), server.namesrv)
    await requester.start()
    try:
        bodies = [f"q{i}".encode() for i in range(3)]
        replies = await asyncio.gather(*(requester.request(Message(topic, b), timeout=40.0) for b in bodies))
    finally:
        await requester.shutdown()
    result = await java_replier
    assert [r.body for r in replies] == [b"re:q0", b"re:q1", b"re:q2"]
    replied = events(result, "replied")
    assert [r.get("sendStatus") for r in replied] == ["SEND_OK"] * 3, result.describe()
    assert {r["replyTopic"] for r in replied} == {REPLY_TOPIC}
    assert {r["properties"]["CORRELATION_ID"] for r in replied} == {
        m.properties[Prop.CORRELATION_ID] for m in replies
    }


def test_java_request_nobody_answers_times_out(server: ServerProcess, java: JavaPeer) -> None:
    topic = unique("JavaUnanswered")
    result = java.run("request", "--topic", topic, "--count", "1", "--request-timeout-ms", "1500")
    timeouts = events(result, "request-timeout")
    assert len(timeouts) == 1 and "wait reply message timeout" in timeouts[0]["message"], result.describe()
    assert events(result, "reply") == []
