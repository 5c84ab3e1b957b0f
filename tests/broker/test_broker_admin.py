"""Admin and query commands against a real server: topics, stats, message lookup, forwarding to consumers."""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest

from tests.support import RawClient, ServerProcess
from tidemq.record import decode_record
from tidemq.remoting import jsonx
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.transport import RemotingConnection, connect

pytestmark = pytest.mark.e2e


async def test_topic_create_stats_and_delete(server: ServerProcess) -> None:
    c = await RawClient.open(server.broker)
    ns = await RawClient.open(server.namesrv)
    assert (await c.create_topic("AdminTopic", 3)).code == ResponseCode.SUCCESS
    route = await ns.route("AdminTopic")  # registered before the create is answered
    assert route is not None and route["queueDatas"][0]["writeQueueNums"] == 3
    assert (await c.create_topic("TBW102x bad")).code == ResponseCode.SYSTEM_ERROR
    assert (await c.create_topic("SCHEDULE_TOPIC_XXXX")).code == ResponseCode.SYSTEM_ERROR
    for i in range(4):
        await c.send("AdminTopic", b"x", queue_id=i % 3)
    stats = await c.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "AdminTopic"})
    table = jsonx.loads(stats.body)["offsetTable"]  # fastjson form: MessageQueue objects as keys
    maxes = {dict(k)["queueId"]: v["maxOffset"] for k, v in table.items()}
    assert maxes == {0: 2, 1: 1, 2: 1}
    assert (
        await c.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Nope"})
    ).code == ResponseCode.TOPIC_NOT_EXIST
    configs = orjson.loads((await c.call(RequestCode.GET_ALL_TOPIC_CONFIG)).body)
    assert configs["topicConfigTable"]["AdminTopic"]["readQueueNums"] == 3
    assert (await c.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "AdminTopic"})).code == 0
    resp, _ = await c.pull("AdminTopic", 0, 0)
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST
    configs = orjson.loads((await c.call(RequestCode.GET_ALL_TOPIC_CONFIG)).body)
    assert "AdminTopic" not in configs["topicConfigTable"]
    c.close()
    ns.close()


async def test_view_by_id_and_query_by_key(server: ServerProcess) -> None:
    c = await RawClient.open(server.broker)
    sent = await c.send(
        "Lookup", b"find me", keys="order-42 customer-7", props={"UNIQ_KEY": "ABCDEF0123456789"}
    )
    from tidemq.record import decode_offset_msg_id

    _, phys = decode_offset_msg_id(sent.msg_id)
    view = await c.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(phys)})
    assert view.code == ResponseCode.SUCCESS and decode_record(view.body).body == b"find me"
    missing = await c.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": "123456789012"})
    assert missing.code == ResponseCode.SYSTEM_ERROR
    now = int(time.time() * 1000)
    query = {
        "topic": "Lookup",
        "maxNum": "10",
        "beginTimestamp": str(now - 60_000),
        "endTimestamp": str(now + 60_000),
    }
    for key in ("order-42", "customer-7", "ABCDEF0123456789"):
        found = await c.call(RequestCode.QUERY_MESSAGE, query | {"key": key})
        assert found.code == ResponseCode.SUCCESS, key
        assert decode_record(found.body).body == b"find me"
        assert "indexLastUpdatePhyoffset" in found.ext_fields
    none = await c.call(RequestCode.QUERY_MESSAGE, query | {"key": "order-4"})
    assert none.code == ResponseCode.QUERY_NOT_FOUND
    other_topic = await c.call(RequestCode.QUERY_MESSAGE, query | {"key": "order-42", "topic": "Elsewhere"})
    assert other_topic.code == ResponseCode.QUERY_NOT_FOUND
    c.close()


async def test_runtime_info_groups_and_connections(server: ServerProcess) -> None:
    c = await RawClient.open(server.broker, "127.0.0.1@conn-test")
    info = orjson.loads((await c.call(RequestCode.GET_BROKER_RUNTIME_INFO)).body)["table"]
    assert info["brokerVersion"] == "409" and int(info["commitLogMaxOffset"]) >= 0
    # As Java's broker: the used share of the commit log's partition, what disk cleaning compares.
    assert 0.0 < float(info["commitLogDiskRatio"]) < 1.0
    assert info["commitLogDirCapacity"].startswith("Total : ")
    none = await c.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "ConnGroup"})
    assert none.code == ResponseCode.CONSUMER_NOT_ONLINE
    await c.heartbeat("ConnGroup", {"ConnTopic": "a || b"})
    conns = orjson.loads(
        (await c.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "ConnGroup"})).body
    )
    assert conns["connectionSet"][0]["clientId"] == "127.0.0.1@conn-test"
    assert conns["subscriptionTable"]["ConnTopic"]["tagsSet"] == ["a", "b"]
    assert conns["messageModel"] == "CLUSTERING"
    group = {"groupName": "ManualGroup", "retryMaxTimes": 3, "consumeEnable": True}
    assert (await c.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=orjson.dumps(group))).code == 0
    groups = orjson.loads((await c.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)).body)
    assert groups["subscriptionGroupTable"]["ManualGroup"]["retryMaxTimes"] == 3
    assert (await c.call(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "ManualGroup"})).code == 0
    groups = orjson.loads((await c.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)).body)
    assert "ManualGroup" not in groups["subscriptionGroupTable"]
    disabled = {"groupName": "Disabled", "consumeEnable": False}
    await c.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=orjson.dumps(disabled))
    await c.send("ConnTopic", b"x")
    resp, _ = await c.pull("ConnTopic", 0, 0, group="Disabled")
    assert resp.code == ResponseCode.NO_PERMISSION
    c.close()


async def test_running_info_and_consume_directly_are_forwarded(server: ServerProcess) -> None:
    """The broker relays 307/309 to the consumer's own connection and returns its answer."""

    seen: list[RemotingCommand] = []

    def consumer_side(conn: RemotingConnection, req: RemotingCommand) -> RemotingCommand | None:
        seen.append(req)
        if req.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            return req.response(body=b'{"properties":{"PROP_CONSUMEORDERLY":"false"}}')
        if req.code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
            body = decode_record(req.body).body
            return req.response(body=orjson.dumps({"consumeResult": "CR_SUCCESS", "remark": body.decode()}))
        return None

    host, port = server.broker.rsplit(":", 1)
    consumer = RawClient(await connect(host, int(port), consumer_side), "127.0.0.1@fwd")
    await consumer.heartbeat("FwdGroup", {"FwdTopic": "*"})
    admin = await RawClient.open(server.broker)
    running = await admin.call(
        RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "FwdGroup", "clientId": "127.0.0.1@fwd"}
    )
    assert running.code == ResponseCode.SUCCESS and b"PROP_CONSUMEORDERLY" in running.body
    sent = await admin.send("FwdTopic", b"direct")
    direct = await admin.call(
        RequestCode.CONSUME_MESSAGE_DIRECTLY,
        {"consumerGroup": "FwdGroup", "clientId": "127.0.0.1@fwd", "msgId": sent.msg_id},
    )
    assert orjson.loads(direct.body) == {"consumeResult": "CR_SUCCESS", "remark": "direct"}
    assert seen[-1].ext_fields["brokerName"] == "broker-a"
    offline = await admin.call(
        RequestCode.GET_CONSUMER_RUNNING_INFO,
        {"consumerGroup": "FwdGroup", "clientId": "127.0.0.1@nobody"},
    )
    assert offline.code == ResponseCode.SYSTEM_ERROR and "not online" in (offline.remark or "")
    consumer.close()
    admin.close()
    await asyncio.sleep(0)
