"""Request-reply against a real ``tidemq server``: a push consumer answers each request with
``Producer.reply``, and the requester's ``request`` gets that answer back
(docs/protocols/rocketmq-request-reply.md)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tests.consumer_support import consumer
from tests.support import ServerProcess, create_topic, eventually, unique
from tidemq.aio import LoopThread
from tidemq.client import Message, MQClientError, Producer, RequestTimeoutError, create_reply
from tidemq.client.blocking import BlockingProducer
from tidemq.client.consumer import ConsumeContext, ConsumeFromWhere, ConsumeStatus, PushConsumer
from tidemq.record import MessageExt, Prop

LAST = ConsumeFromWhere.LAST_OFFSET


class Replier:
    """A listener that answers every request with ``re:<body>``, or keeps it unanswered when ``silent``."""

    def __init__(self, producer: Producer, *, silent: bool = False) -> None:
        self.producer = producer
        self.silent = silent
        self.requests: list[MessageExt] = []
        self.consumer: PushConsumer | None = None

    async def __call__(self, msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        for msg in msgs:
            self.requests.append(msg)
            if not self.silent:
                await self.producer.reply(msg, b"re:" + msg.body)
        return ConsumeStatus.CONSUME_SUCCESS


async def _serving(server: ServerProcess, topic: str, *, silent: bool = False) -> tuple[Producer, Replier]:
    await create_topic(server.broker, topic, routed_by=server.namesrv)
    replier_producer = Producer(unique("ReplierPG"), server.namesrv)
    await replier_producer.start()
    replier = Replier(replier_producer, silent=silent)
    c = replier.consumer = consumer(
        server.namesrv, unique("ReplierCG"), topic, replier, consume_from_where=LAST
    )
    await c.start()
    # A consumer starting at the last offset must own its queues before the first request is sent.
    await eventually(
        lambda: sum(mq.topic == topic for mq in c.rebalancer.process_queues) == 4,
        what="replier owns its queues",
    )
    return replier_producer, replier


async def _stop(replier_producer: Producer, replier: Replier) -> None:
    if replier.consumer is not None:
        await replier.consumer.shutdown()
    await replier_producer.shutdown()


@pytest.mark.e2e
async def test_concurrent_requests_each_get_their_own_reply(server: ServerProcess) -> None:
    topic = unique("Req")
    replier_producer, replier = await _serving(server, topic)
    requester = Producer(unique("RequesterPG"), server.namesrv)
    await requester.start()
    try:
        bodies = [f"question-{i}".encode() for i in range(12)]
        replies = await asyncio.gather(*(requester.request(Message(topic, b), timeout=15.0) for b in bodies))
        assert [r.body for r in replies] == [b"re:" + b for b in bodies]
        by_body = {m.body: m for m in replier.requests}
        for body, reply in zip(bodies, replies, strict=True):
            sent = by_body[body].properties
            assert reply.properties[Prop.CORRELATION_ID] == sent[Prop.CORRELATION_ID]
            assert sent[Prop.REPLY_TO_CLIENT] == requester.instance.client_id
            assert sent[Prop.TTL] == "15000"
            assert reply.properties[Prop.MSG_TYPE] == "reply"
            assert reply.topic == "DefaultCluster_REPLY_TOPIC"
        assert len({m.properties[Prop.CORRELATION_ID] for m in replier.requests}) == len(bodies)
        assert len(requester.instance.replies) == 0, "answered requests are forgotten"
        got: list[MessageExt | None] = []
        done = asyncio.Event()

        def callback(reply: MessageExt | None, exc: BaseException | None) -> None:
            got.append(reply)
            done.set()

        task = requester.request_async(Message(topic, b"async"), 15.0, callback)
        assert (await task).body == b"re:async"
        await done.wait()
        assert got[0] is not None and got[0].body == b"re:async"
    finally:
        await requester.shutdown()
        await _stop(replier_producer, replier)


@pytest.mark.e2e
async def test_unanswered_request_times_out_and_late_reply_is_dropped(
    server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    topic = unique("ReqSilent")
    replier_producer, replier = await _serving(server, topic, silent=True)
    requester = Producer(unique("RequesterPG"), server.namesrv)
    await requester.start()
    try:
        with pytest.raises(RequestTimeoutError) as err:
            await requester.request(Message(topic, b"anyone?"), timeout=1.5)
        request = await eventually(lambda: replier.requests and replier.requests[0], what="request consumed")
        correlation_id = request.properties[Prop.CORRELATION_ID]
        assert err.value.correlation_id == correlation_id
        assert correlation_id in str(err.value) and "1.5 s" in str(err.value) and topic in str(err.value)
        assert isinstance(err.value, MQClientError)
        assert len(requester.instance.replies) == 0
        # The requester is still connected: the broker hands it the late reply, which it drops.
        with caplog.at_level(logging.DEBUG, logger="tidemq.client.replies"):
            result = await replier_producer.reply(request, b"too late")
            assert result.message_queue.topic == "DefaultCluster_REPLY_TOPIC"
        assert any(correlation_id in r.getMessage() and "dropped" in r.getMessage() for r in caplog.records)
    finally:
        await requester.shutdown()
        await _stop(replier_producer, replier)


@pytest.mark.e2e
async def test_reply_to_a_requester_that_left_gets_the_brokers_error(server: ServerProcess) -> None:
    topic = unique("ReqGone")
    replier_producer, replier = await _serving(server, topic, silent=True)
    requester = Producer(unique("RequesterPG"), server.namesrv)
    await requester.start()
    requester_id = requester.instance.client_id
    with pytest.raises(RequestTimeoutError):
        await requester.request(Message(topic, b"bye"), timeout=1.0)
    await requester.shutdown()
    try:
        request = await eventually(lambda: replier.requests and replier.requests[0], what="request consumed")
        with pytest.raises(MQClientError) as err:
            await replier_producer.reply(request, b"nobody listens")
        assert f"channel of <{requester_id}> not found" in str(err.value)
        assert "SYSTEM_ERROR" in str(err.value)
    finally:
        await _stop(replier_producer, replier)


@pytest.mark.e2e
def test_blocking_request(server: ServerProcess) -> None:
    topic = unique("ReqBlocking")

    async def start() -> tuple[Producer, Replier]:
        return await _serving(server, topic)

    replier_producer, replier = LoopThread.run(start())
    try:
        with BlockingProducer(unique("BlockingRequesterPG"), server.namesrv) as requester:
            assert requester.request(Message(topic, b"sync?"), timeout=15.0).body == b"re:sync?"
            assert requester.request_async(Message(topic, b"fut"), 15.0).result(20).body == b"re:fut"
    finally:
        LoopThread.run(_stop(replier_producer, replier))


def test_create_reply_copies_the_request_addressing() -> None:
    request = MessageExt(
        topic="Orders",
        body=b"q",
        props={
            Prop.CLUSTER: "Blue",
            Prop.CORRELATION_ID: "c-1",
            Prop.REPLY_TO_CLIENT: "10.0.0.1@9",
            Prop.TTL: "3000",
            Prop.TAGS: "not copied",
        },
    )
    reply = create_reply(request, b"a")
    assert reply.topic == "Blue_REPLY_TOPIC" and reply.body == b"a"
    assert reply.properties == {
        "MSG_TYPE": "reply",
        "CORRELATION_ID": "c-1",
        "REPLY_TO_CLIENT": "10.0.0.1@9",
        "TTL": "3000",
    }
    with pytest.raises(MQClientError, match=r"property\[CLUSTER\] is null"):
        create_reply(MessageExt(topic="Orders", body=b"q"), b"a")
