"""RocketMQ 5.x topic attributes: the change-list rules (unit) and UPDATE_AND_CREATE_TOPIC with
``attributes`` against a real server: stored in topics.json as 5.x writes them, kept by an update without
the field, refused changes answered SYSTEM_ERROR with nothing created; and the gRPC endpoint's use of
``message.type`` (route types, send check; remoting sends are not checked, as on a 5.x broker)."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from tests.support import RawClient, ServerProcess, tidemq_cli, unique
from tidemq.broker.metadata import TopicConfigTable
from tidemq.broker.topic_attributes import AttributeProblem, apply_changes, parse_changes
from tidemq.client import api
from tidemq.client.admin import Admin
from tidemq.grpc.proto import definition_pb2 as pb
from tidemq.grpc.proto import service_pb2 as spb
from tidemq.grpc.proto import service_pb2_grpc as spb_grpc
from tidemq.remoting.codes import RequestCode, ResponseCode

CLIENT = (("x-mq-client-id", "test-types@1"), ("x-mq-language", "PYTHON"))


def test_changes_parse_and_apply_as_5x() -> None:
    assert parse_changes(None) == {} and parse_changes("") == {}
    assert parse_changes("+message.type=FIFO,-queue.type") == {"+message.type": "FIFO", "-queue.type": ""}
    for bad in ("message.type=FIFO", "+message.type", "+message.type=", "-x=1"):
        with pytest.raises(AttributeProblem, match="format is wrong"):
            parse_changes(bad)
    assert apply_changes(None, parse_changes("+message.type=DELAY")) == {"message.type": "DELAY"}
    assert apply_changes({"message.type": "FIFO"}, {}) == {"message.type": "FIFO"}
    assert apply_changes({"message.type": "FIFO"}, parse_changes("+message.type=NORMAL")) == {
        "message.type": "NORMAL"
    }
    assert apply_changes({"message.type": "FIFO"}, parse_changes("-message.type")) == {}
    refusals = {
        "+message.type=SOMETIMES": "value is not in set",
        "+colour=red": "unsupported key: colour",
        "-message.type": "only add attribute is supported while creating topic",
    }
    for change, remark in refusals.items():
        with pytest.raises(AttributeProblem, match=remark):
            apply_changes(None, parse_changes(change))
    with pytest.raises(AttributeProblem, match="unchangeable"):
        apply_changes({"queue.type": "SimpleCQ"}, parse_changes("+queue.type=BatchCQ"))
    with pytest.raises(AttributeProblem, match="nonexistent"):
        apply_changes({}, parse_changes("-message.type"))


async def _create(server: ServerProcess, topic: str, attributes: str | None) -> tuple[int, str | None]:
    c = await RawClient.open(server.broker)
    try:
        resp = await c.conn.invoke(api.create_topic_request(topic, 2, attributes=attributes), 6.0)
    finally:
        c.close()
    return resp.code, resp.remark


@pytest.mark.e2e
async def test_typed_topics_over_remoting_are_stored_and_checked_on_grpc(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    fifo, plain, bad = unique("tfifo"), unique("tplain"), unique("tbad")
    try:
        assert await _create(server, fifo, "+message.type=FIFO") == (ResponseCode.SUCCESS, None)
        assert await _create(server, plain, None) == (ResponseCode.SUCCESS, None)
        code, remark = await _create(server, bad, "+message.type=MIXED")
        assert (code, remark) == (ResponseCode.SYSTEM_ERROR, "MIXED message type is not supported.")
        code, remark = await _create(server, bad, "message.type=FIFO")
        assert code == ResponseCode.SYSTEM_ERROR and "format is wrong" in (remark or "")
        # An update without the field keeps the type (as 5.x: the request's attributes are a change list).
        assert await _create(server, fifo, None) == (ResponseCode.SUCCESS, None)
        async with Admin(server.namesrv) as admin:
            await admin.create_topic(unique("tadmin"), 2, message_type="delay")
            c = await RawClient.open(server.broker)
            try:
                table = (await api.call_json(c.conn, RequestCode.GET_ALL_TOPIC_CONFIG))["topicConfigTable"]
            finally:
                c.close()
        assert table[fifo]["attributes"] == {"message.type": "FIFO"}
        assert table[plain]["attributes"] == {} and bad not in table
        assert [v["attributes"] for k, v in table.items() if k.startswith("tadmin")] == [
            {"message.type": "DELAY"}
        ]

        async with grpc.aio.insecure_channel(server.grpc) as channel:
            stub = spb_grpc.MessagingServiceStub(channel)

            async def route(topic: str) -> list[int]:
                answer = await stub.QueryRoute(
                    spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=CLIENT
                )
                return list(answer.message_queues[0].accept_message_types)

            async def send(topic: str, group: str = "") -> spb.SendMessageResponse:
                sp = pb.SystemProperties(message_id=unique("id"), message_type=pb.NORMAL, message_group=group)
                message = pb.Message(topic=pb.Resource(name=topic), body=b"x", system_properties=sp)
                answer: spb.SendMessageResponse = await stub.SendMessage(
                    spb.SendMessageRequest(messages=[message]), metadata=CLIENT
                )
                return answer

            assert await route(fifo) == [pb.FIFO]
            assert await route(plain) == [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]
            refused = await send(fifo)
            assert refused.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE and not refused.entries
            assert refused.status.message == (
                "TopicMessageType validate failed, the expected type is FIFO, but actual type is NORMAL"
            )
            assert (await send(fifo, "g1")).status.code == pb.OK
            assert (await send(plain, "g1")).status.code == pb.OK and (await send(plain)).status.code == pb.OK
            unknown = await send(unique("nosuch"))
            assert unknown.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
            assert "expected type is UNSPECIFIED, but actual type is NORMAL" in unknown.status.message

        # A remoting send to the FIFO topic without a sharding key is stored (the 5.x broker checks nothing).
        c = await RawClient.open(server.broker)
        try:
            sent = await c.send(fifo, b"remoting")
            assert sent.code == ResponseCode.SUCCESS, sent.remark
        finally:
            c.close()
        # Durable: the type survives a restart.
        server.stop()
        stored = json.loads((tmp_path / "data" / "config" / "topics.json").read_text())
        assert stored["topicConfigTable"][fifo]["attributes"] == {"message.type": "FIFO"}
        server.start()
        async with grpc.aio.insecure_channel(server.grpc) as channel:
            again = await spb_grpc.MessagingServiceStub(channel).QueryRoute(
                spb.QueryRouteRequest(topic=pb.Resource(name=fifo)), metadata=CLIENT
            )
            assert list(again.message_queues[0].accept_message_types) == [pb.FIFO]
    finally:
        server.stop()


@pytest.mark.e2e
def test_cli_topic_create_with_a_message_type(fresh_server: ServerProcess) -> None:
    topic = unique("tcli")
    done = tidemq_cli(
        "topic", "create", topic, "--message-type", "transaction", "--namesrv", fresh_server.namesrv
    )
    assert done.returncode == 0, done.stderr
    # Stored: topics.json with its journal of changes not yet folded in (broker/metadata.py).
    stored = TopicConfigTable(fresh_server.data_dir / "config" / "topics.json").get(topic)
    assert stored is not None and stored.attributes == {"message.type": "TRANSACTION"}
