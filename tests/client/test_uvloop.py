"""The clients on uvloop's event loop: applications that run uvloop must be able to use them.

uvloop's transports do not subclass ``asyncio.Transport``; a protocol that asserted they did closed every
connection it made.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.support import ServerProcess, create_topic, eventually, unique
from tidemq.client.consumer import ConsumeFromWhere
from tidemq.client.consumer.lite_pull import LitePullConsumer
from tidemq.client.message import Message
from tidemq.client.producer import Producer
from tidemq.nsq import client as nsq

pytestmark = pytest.mark.e2e

uvloop = pytest.importorskip("uvloop")


@pytest.mark.uvloop
async def test_rocketmq_producer_and_lite_pull_consumer(server: ServerProcess) -> None:
    assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
    topic = unique("Uv")

    await create_topic(server.broker, topic)
    async with Producer(unique("UvP"), server.namesrv) as producer:
        await producer.send(Message(topic, b"single"))
        await producer.send_batch([Message(topic, b"b%d" % i) for i in range(20)])
    consumer = LitePullConsumer(
        unique("UvC"), server.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    )
    consumer.subscribe(topic, "*")
    await consumer.start()
    got: list[bytes] = []
    try:
        for _ in range(40):
            got += [m.body for m in await consumer.poll(timeout=0.5)]
            if len(got) >= 21:
                break
    finally:
        await consumer.shutdown()
    assert sorted(got) == sorted([b"single"] + [b"b%d" % i for i in range(20)])


@pytest.mark.uvloop
async def test_nsq_producer_and_consumer(nsqd: ServerProcess) -> None:
    assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
    topic = unique("uv")
    bodies = [b"n%d" % i for i in range(50)]

    seen: list[bytes] = []

    async def handler(message: nsq.Message) -> None:
        seen.append(message.body)

    consumer = nsq.Consumer(topic, "ch", max_in_flight=10)
    consumer.add_handler(handler)
    await consumer.connect_to_nsqd(nsqd.nsqd)
    async with nsq.Producer(nsqd.nsqd) as producer:
        await producer.publish(topic, bodies[0])
        await producer.multi_publish(topic, bodies[1:])
    try:
        await eventually(lambda: len(seen) >= len(bodies), what="all delivered")
    finally:
        await consumer.stop()
    assert sorted(seen) == sorted(bodies)
