"""A ReceiveMessage stream cut while the server is still writing its messages: what was leased but not
written becomes visible again in about a second (the proxy's ReceiveMessageResponseStreamWriter nacks
it), instead of after the receive's invisible time; nothing is lost."""

from __future__ import annotations

import time

import grpc
import pytest

from tests.support import ServerProcess, create_topic, unique
from tidemq.grpc.proto import definition_pb2 as pb
from tidemq.grpc.proto import service_pb2 as spb
from tidemq.grpc.proto import service_pb2_grpc as spb_grpc

pytestmark = pytest.mark.e2e

CLIENT = (("x-mq-client-id", "test-cut@1"), ("x-mq-language", "PYTHON"))
#: Big enough that the server blocks on HTTP/2 flow control long before it has written them all.
BODY = b"x" * (1024 * 1024)
COUNT = 24


def receive_request(group: str, topic: str, invisible_s: int) -> spb.ReceiveMessageRequest:
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=32,
    )
    request.invisible_duration.seconds = invisible_s
    request.long_polling_timeout.seconds = 5
    return request


async def test_messages_of_a_cut_receive_stream_come_back_in_a_second(server: ServerProcess) -> None:
    topic, group = unique("cut"), unique("GCUT")
    await create_topic(server.broker, topic, 1, routed_by=server.namesrv)
    options = [("grpc.max_receive_message_length", 8 * 1024 * 1024)]
    async with grpc.aio.insecure_channel(server.grpc, options=options) as channel:
        stub = spb_grpc.MessagingServiceStub(channel)
        for i in range(COUNT):
            sp = pb.SystemProperties(message_id=unique("id"), message_type=pb.NORMAL, keys=[f"k{i}"])
            sent = await stub.SendMessage(
                spb.SendMessageRequest(
                    messages=[pb.Message(topic=pb.Resource(name=topic), body=BODY, system_properties=sp)]
                ),
                metadata=CLIENT,
            )
            assert sent.status.code == pb.OK

        # Invisible for 60 s; read the status and one message, then cut the stream.
        call = stub.ReceiveMessage(receive_request(group, topic, 60), metadata=CLIENT, timeout=30)
        first = [await call.read(), await call.read()]
        assert first[0].status.code == pb.OK and first[1].HasField("message")
        call.cancel()
        cut_at = time.monotonic()

        seen = {first[1].message.system_properties.keys[0]}
        again: set[str] = set()
        while time.monotonic() - cut_at < 10 and len(seen | again) < COUNT:
            async for response in stub.ReceiveMessage(
                receive_request(group, topic, 60), metadata=CLIENT, timeout=30
            ):
                if response.HasField("message"):
                    again.add(response.message.system_properties.keys[0])
    # The ones the server had not written were given back at once; the ones in transit to the cut
    # client stay leased (60 s), as with the proxy.
    assert again, "nothing the cut stream leased came back within 10 s"
    assert not again & seen, "a message the client received was handed out again before its time"
    assert len(again) >= COUNT // 2, sorted(again)
