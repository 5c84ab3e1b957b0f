"""SEND_REPLY_MESSAGE(_V2) against a real ``tidemq server``, spoken raw: the push to the requester, its
header, the stored copy and the broker's answers (docs/protocols/rocketmq-request-reply.md)."""

from __future__ import annotations

import orjson
import pytest

from tests.support import RawClient, ServerProcess, unique
from tidemq.client import api
from tidemq.record import decode_properties, encode_properties
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.transport import RemotingConnection, connect

pytestmark = pytest.mark.e2e

REPLY_TOPIC = "DefaultCluster_REPLY_TOPIC"


async def _send_reply(
    raw: RawClient, props: dict[str, str], code: int = RequestCode.SEND_REPLY_MESSAGE_V2
) -> RemotingCommand:
    """A reply send as Java's client makes it: V2's one-letter header fields, V1's full names."""
    header = api.send_header(
        REPLY_TOPIC, queue_id=0, properties=encode_properties(props), producer_group="PG"
    )
    ext = header.to_compact_ext() if code == RequestCode.SEND_REPLY_MESSAGE_V2 else header.to_ext()
    return await raw.call(code, ext, b"answer")


async def test_name_server_routes_the_reply_topic(server: ServerProcess) -> None:
    c = await RawClient.open(server.namesrv)
    try:
        resp = await c.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": REPLY_TOPIC})
    finally:
        c.close()
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    route = orjson.loads(resp.body)
    assert [(q["brokerName"], q["writeQueueNums"]) for q in route["queueDatas"]] == [("broker-a", 1)]


async def test_reply_is_pushed_to_the_requester_and_stored(server: ServerProcess) -> None:
    requester_id = unique("10.1.1.1@requester")
    pushed: list[RemotingCommand] = []

    def on_request(conn: RemotingConnection, req: RemotingCommand) -> RemotingCommand:
        pushed.append(req)
        return req.response()

    host, port = server.broker.rsplit(":", 1)
    requester = await connect(host, int(port), on_request)
    replier = await RawClient.open(server.broker)
    try:
        heartbeat = {
            "clientID": requester_id,
            "producerDataSet": [{"groupName": "RPG"}],
            "consumerDataSet": [],
        }
        beat = await requester.invoke(RemotingCommand(RequestCode.HEART_BEAT, body=orjson.dumps(heartbeat)))
        assert beat.code == ResponseCode.SUCCESS
        top = await replier.call(RequestCode.GET_MAX_OFFSET, {"topic": REPLY_TOPIC, "queueId": "0"})
        before = int(top.ext_fields["offset"])
        props = {
            "CORRELATION_ID": "corr-1",
            "REPLY_TO_CLIENT": requester_id,
            "TTL": "3000",
            "MSG_TYPE": "reply",
        }
        for code in (RequestCode.SEND_REPLY_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2):
            sent = await _send_reply(replier, props, code)
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            assert int(sent.ext_fields["queueOffset"]) == before + (code == RequestCode.SEND_REPLY_MESSAGE_V2)
        assert [p.code for p in pushed] == [RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT] * 2
        push = pushed[0]
        assert push.body == b"answer"
        ext = push.ext_fields
        assert ext["topic"] == REPLY_TOPIC and ext["producerGroup"] == "PG"
        assert ext["storeHost"] == server.broker and ext["bornHost"].startswith("127.0.0.1:")
        assert int(ext["storeTimestamp"]) > 0 and int(ext["bornTimestamp"]) > 0
        pushed_props = decode_properties(ext["properties"])
        assert pushed_props["CORRELATION_ID"] == "corr-1" and pushed_props["REPLY_TO_CLIENT"] == requester_id
        assert int(pushed_props["PUSH_REPLY_TIME"]) > 0
        _, stored = await replier.pull(REPLY_TOPIC, 0, before)
        assert [m.body for m in stored] == [b"answer", b"answer"]
        assert stored[0].properties["CORRELATION_ID"] == "corr-1"
    finally:
        requester.close()
        replier.close()


async def test_reply_without_a_reachable_requester_is_refused_with_a_remark(server: ServerProcess) -> None:
    replier = await RawClient.open(server.broker)
    try:
        gone = await _send_reply(replier, {"CORRELATION_ID": "c", "REPLY_TO_CLIENT": "gone@1"})
        assert gone.code == ResponseCode.SYSTEM_ERROR
        assert gone.remark == "push reply message fail, channel of <gone@1> not found."
        unnamed = await _send_reply(replier, {"CORRELATION_ID": "c"})
        assert unnamed.code == ResponseCode.SYSTEM_ERROR
        assert unnamed.remark == "reply message properties[REPLY_TO_CLIENT] is null"
    finally:
        replier.close()
