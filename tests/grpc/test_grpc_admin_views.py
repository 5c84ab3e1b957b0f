"""5.x SDK clients connected over gRPC in the broker's admin views, where a RocketMQ operator looks:
GET_CONSUMER_CONNECTION_LIST (as the proxy registers them: language, address, CONSUME_ACTIVELY for a
SimpleConsumer), QUERY_TOPIC_CONSUME_BY_WHO, and GET_CONSUME_STATS of a popping group (its committed offset
is what its acks advanced), through raw requests, ``tidemq group progress`` and the Java 4.9.8 admin."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.grpc.test_grpc_consumer import SdkConsumer
from tests.grpc.test_grpc_endpoint import sdk_send
from tests.java_client_support import JavaPeer
from tests.support import RawClient, ServerProcess, create_topic, eventually, tidemq_cli, unique
from tidemq.remoting import jsonx
from tidemq.remoting.codes import RequestCode, ResponseCode

pytestmark = pytest.mark.e2e


async def call_json(server: ServerProcess, code: int, ext: dict[str, str]) -> tuple[int, dict[str, Any]]:
    c = await RawClient.open(server.broker)
    try:
        answer = await c.call(code, ext)
        return answer.code, (jsonx.loads(bytes(answer.body)) if answer.code == 0 and answer.body else {})
    finally:
        c.close()


async def connections(server: ServerProcess, group: str) -> tuple[int, dict[str, Any]]:
    return await call_json(server, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})


async def test_sdk_consumer_in_connection_list_consumed_by_and_consume_stats(server: ServerProcess) -> None:
    topic, group = unique("adm"), unique("GADM")
    await create_topic(server.broker, topic, 1, routed_by=server.namesrv)
    sdk_send(server.grpc, topic, [{"body": f"m{i}", "tag": "TagA"} for i in range(3)])
    consumer = SdkConsumer(server.grpc, group, topic, "TagA || TagB")
    try:
        got = sorted(consumer.receive_until(3, invisible_s=60), key=lambda m: m["body"])
        assert [m["body"] for m in got] == ["m0", "m1", "m2"]
        assert consumer.ack(got[:2]) == ["ok", "ok"]

        code, conn = await connections(server, group)
        assert code == ResponseCode.SUCCESS, conn
        (member,) = conn["connectionSet"]
        assert member["language"] == "PYTHON" and member["version"] == 409
        assert member["clientAddr"].startswith("127.0.0.1:") and member["clientId"]
        assert conn["consumeType"] == "CONSUME_ACTIVELY" and conn["messageModel"] == "CLUSTERING"
        assert conn["consumeFromWhere"] == "CONSUME_FROM_LAST_OFFSET"
        sub = conn["subscriptionTable"][topic]
        assert sub["subString"] == "TagA || TagB" and sorted(sub["tagsSet"]) == ["TagA", "TagB"]

        code, who = await call_json(server, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic})
        assert group in who["groupList"]

        code, stats = await call_json(server, RequestCode.GET_CONSUME_STATS, {"consumerGroup": group})
        ((key, queue),) = stats["offsetTable"].items()
        assert dict(key)["topic"] == topic and (queue["brokerOffset"], queue["consumerOffset"]) == (3, 2)

        cli = await asyncio.to_thread(
            tidemq_cli, "group", "progress", group, "--namesrv", server.namesrv, "--format", "json"
        )
        assert cli.returncode == 0, cli.stderr
        (row,) = [json.loads(line) for line in cli.stdout.splitlines()]
        assert (row["topic"], row["broker_offset"], row["consumer_offset"], row["lag"]) == (topic, 3, 2, 1)
    finally:
        consumer.close()

    # NotifyClientTermination (or the stream's end) takes it out of the views; its progress stays.
    async def offline() -> bool:
        return (await connections(server, group))[0] == ResponseCode.CONSUMER_NOT_ONLINE

    await eventually(offline, what="the consumer left the connection list")
    code, stats = await call_json(server, RequestCode.GET_CONSUME_STATS, {"consumerGroup": group})
    assert [q["consumerOffset"] for q in stats["offsetTable"].values()] == [2]
    code, who = await call_json(server, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic})
    assert group in who["groupList"]  # offline, but it has pop state on the topic


@pytest.mark.java_client
async def test_java_admin_sees_the_sdk_consumer_and_its_progress(
    server: ServerProcess, tmp_path: Path
) -> None:
    topic, group = unique("adm"), unique("GADMJ")
    await create_topic(server.broker, topic, 1, routed_by=server.namesrv)
    sdk_send(server.grpc, topic, [{"body": f"m{i}"} for i in range(3)])
    consumer = SdkConsumer(server.grpc, group, topic)
    try:
        got = sorted(consumer.receive_until(3, invisible_s=60), key=lambda m: m["body"])
        assert consumer.ack(got[:2]) == ["ok", "ok"]
        java = JavaPeer(server.namesrv, tmp_path / "java-home")
        calls = (f"consumerConnection:{group}", f"consumerProgress:{group}")
        answers = await asyncio.to_thread(java.admin, *calls)
    finally:
        consumer.close()
    assert all(a["ok"] for a in answers.values()), answers
    conn = answers[calls[0]]["result"]
    (member,) = conn["connections"]
    assert member["language"] == "PYTHON" and member["clientAddr"].startswith("127.0.0.1:")
    assert conn["consumeType"] == "CONSUME_ACTIVELY" and conn["subscriptions"][topic]["subString"] == "*"
    progress = answers[calls[1]]["result"]
    (queue,) = [q for q in progress["queues"] if q["topic"] == topic]
    assert (queue["brokerOffset"], queue["consumerOffset"]) == (3, 2) and progress["diffTotal"] == 1
