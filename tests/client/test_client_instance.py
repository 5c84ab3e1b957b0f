"""What the client instance does for consumers: answering brokers, namespaces, hooks."""

from __future__ import annotations

import orjson
import pytest

from tests.consumer_support import Collector, consumer, produce
from tests.support import RawClient, ServerProcess, create_topic, eventually
from tidemq.client import ConsumeFromWhere, Message, Producer, PushConsumer
from tidemq.client.config import ClientConfig
from tidemq.remoting import jsonx
from tidemq.remoting.codes import RequestCode, ResponseCode

pytestmark = pytest.mark.e2e

FIRST = ConsumeFromWhere.FIRST_OFFSET


async def test_broker_forwarded_requests_reach_the_consumer(server: ServerProcess) -> None:
    await create_topic(server.broker, "Forwarded", 2)
    got = Collector()
    c = consumer(server.namesrv, "FwdClients", "Forwarded", got, consume_from_where=FIRST)
    await c.start()
    await eventually(lambda: len(c.rebalancer.process_queues) == 3, what="queues assigned", timeout=20.0)
    admin = await RawClient.open(server.broker)
    ext = {"consumerGroup": "FwdClients", "clientId": c.instance.client_id}
    running = await admin.call(RequestCode.GET_CONSUMER_RUNNING_INFO, ext)
    assert running.code == ResponseCode.SUCCESS, running.remark
    info = jsonx.loads(running.body)
    assert info["properties"]["PROP_CONSUMEORDERLY"] == "false"
    assert len(info["mqTable"]) == 3 and all(isinstance(k, tuple) for k in info["mqTable"])
    sent = await admin.send("Forwarded", b"direct please")
    direct = await admin.call(RequestCode.CONSUME_MESSAGE_DIRECTLY, ext | {"msgId": sent.msg_id})
    assert orjson.loads(direct.body)["consumeResult"] == "CR_SUCCESS"
    assert b"direct please" in got.bodies
    admin.close()
    await c.shutdown()


async def test_namespace_wraps_topics_and_groups_on_the_wire(server: ServerProcess) -> None:
    config = ClientConfig(namesrv_addr=server.namesrv, namespace="tenant1")
    async with Producer("NsProducer", config=config) as producer:
        result = await producer.send(Message("Orders", b"namespaced"))
    assert result.message_queue.topic == "Orders"
    ns = await RawClient.open(server.namesrv)
    assert await ns.route("tenant1%Orders") is not None and await ns.route("Orders") is None
    ns.close()
    got = Collector()
    c = PushConsumer(
        "NsGroup",
        config=ClientConfig(namesrv_addr=server.namesrv, namespace="tenant1"),
        consume_from_where=FIRST,
    )
    c.subscribe("Orders")
    c.register_listener(got)
    await c.start()
    await eventually(lambda: got.bodies == [b"namespaced"], what="namespaced delivery", timeout=20.0)
    assert got.deliveries[0].topic == "Orders", "the namespace is stripped from received messages"
    assert c.group == "tenant1%NsGroup"
    await c.shutdown()


async def test_send_and_consume_hooks_see_every_call(server: ServerProcess) -> None:
    sends: list[tuple[str, bool]] = []
    async with Producer("HookProducer", server.namesrv) as producer:
        producer.interceptors.append(
            lambda msg, mq, result, exc: sends.append((msg.topic, result is not None))
        )
        await producer.send(Message("Hooked", b"x"))
    assert sends == [("Hooked", False), ("Hooked", True)], "before and after each send"
    seen: list[int] = []
    got = Collector()
    c = consumer(server.namesrv, "HookGroup", "Hooked", got, consume_from_where=FIRST)
    c.hooks.append(lambda msgs, ctx, status, exc: seen.append(len(msgs)))
    await c.start()
    await produce(server.namesrv, "Hooked", 3)
    await eventually(lambda: len(got.distinct()) == 4, what="hooked consumption", timeout=20.0)
    await c.shutdown()
    assert sum(seen) == 4
