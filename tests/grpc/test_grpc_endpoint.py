"""``tidemq server``'s RocketMQ 5.x gRPC endpoint against the official Python SDK (rocketmq-python-client,
run as a subprocess: tests/grpc/sdk_producer.py) and against raw MessagingService calls; what the SDK sends
is read back by tidemq's remoting consumer from the same store."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme
from google.protobuf.timestamp_pb2 import Timestamp

from tests.consumer_support import drain
from tests.support import ServerProcess, create_topic, free_port, unique
from tidemq.grpc.proto import definition_pb2 as pb
from tidemq.grpc.proto import service_pb2 as spb
from tidemq.grpc.proto import service_pb2_grpc as spb_grpc

pytestmark = pytest.mark.e2e

SDK_PRODUCER = Path(__file__).with_name("sdk_producer.py")
CLIENT = (("x-mq-client-id", "test-client@1"), ("x-mq-language", "PYTHON"))


def sdk_send(endpoint: str, topic: str, spec: list[dict[str, Any]]) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, str(SDK_PRODUCER), endpoint, topic, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


async def test_sdk_producer_normal_fifo_and_delay_read_by_a_remoting_consumer(server: ServerProcess) -> None:
    topic = unique("grpc")
    await create_topic(server.broker, topic, 4, routed_by=server.namesrv)
    deliver_at_s = int(time.time()) + 3
    spec: list[dict[str, Any]] = [
        {"body": "plain", "tag": "TagA", "key": "order-1", "props": {"color": "red"}},
        *({"body": f"fifo-{i}", "group": "g1"} for i in range(3)),
        {"body": "later", "deliver_at_s": deliver_at_s},
    ]
    receipts = sdk_send(server.grpc, topic, spec)
    assert [r["ok"] for r in receipts] == [True] * 5, receipts

    got = await drain(server.namesrv, topic, expect=5, timeout=30)
    by_body = {m.body: m for m in got}
    assert sorted(by_body) == sorted(item["body"].encode() for item in spec), [m.body for m in got]
    plain = by_body[b"plain"]
    assert plain.tags == "TagA" and plain.keys == "order-1" and plain.properties["color"] == "red"
    assert [m.properties["UNIQ_KEY"] for m in (by_body[item["body"].encode()] for item in spec)] == [
        r["message_id"] for r in receipts
    ]
    assert plain.born_host.startswith("127.0.0.1:")
    assert abs(plain.born_timestamp - receipts[0]["sent_ms"]) < 5000
    fifo = [m for m in got if m.body.startswith(b"fifo-")]
    assert len({m.queue_id for m in fifo}) == 1  # one message group, one queue, in order
    assert [m.body for m in sorted(fifo, key=lambda m: m.queue_offset)] == [b"fifo-0", b"fifo-1", b"fifo-2"]
    assert all(m.properties["__SHARDINGKEY"] == "g1" for m in fifo)
    later = by_body[b"later"]
    assert later.properties["TIMER_DELIVER_MS"] == str(deliver_at_s * 1000)
    assert later.store_timestamp >= deliver_at_s * 1000, "delivered before its delivery time"


async def test_sdk_send_to_an_unknown_topic_fails(server: ServerProcess) -> None:
    (receipt,) = sdk_send(server.grpc, unique("nosuch"), [{"body": "x"}])
    assert not receipt["ok"] and "route" in receipt["error"]


def endpoints(server: ServerProcess) -> pb.Endpoints:
    return pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=1)])


async def test_query_route(server: ServerProcess) -> None:
    topic = unique("route")
    await create_topic(server.broker, topic, 2)
    async with grpc.aio.insecure_channel(server.grpc) as channel:
        stub = spb_grpc.MessagingServiceStub(channel)
        known = await stub.QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name=topic), endpoints=endpoints(server)), metadata=CLIENT
        )
        unknown = await stub.QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name=unique("nosuch")), endpoints=endpoints(server)),
            metadata=CLIENT,
        )
        anonymous = await stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)))
    assert known.status.code == pb.OK
    assert [(q.id, q.permission) for q in known.message_queues] == [(0, pb.READ_WRITE), (1, pb.READ_WRITE)]
    broker = known.message_queues[0].broker
    assert [(a.host, a.port) for a in broker.endpoints.addresses] == [("127.0.0.1", server.grpc_port)]
    assert pb.FIFO in known.message_queues[0].accept_message_types
    assert unknown.status.code == pb.TOPIC_NOT_FOUND and not unknown.message_queues
    assert anonymous.status.code == pb.CLIENT_ID_REQUIRED


async def test_bad_sends_get_the_proxys_status(server: ServerProcess) -> None:
    topic = unique("bad")
    await create_topic(server.broker, topic, 1)

    def send(body: bytes, topic: str = topic, **system: Any) -> spb.SendMessageRequest:
        sp = pb.SystemProperties(message_id=unique("id"), **{"message_type": pb.NORMAL, **system})
        return spb.SendMessageRequest(
            messages=[pb.Message(topic=pb.Resource(name=topic), body=body, system_properties=sp)]
        )

    async with grpc.aio.insecure_channel(server.grpc) as channel:
        stub = spb_grpc.MessagingServiceStub(channel)
        too_large = await stub.SendMessage(send(b"x" * (4 * 1024 * 1024 + 1)), metadata=CLIENT)
        bad_name = await stub.SendMessage(send(b"x", topic="bad topic!"), metadata=CLIENT)
        system = await stub.SendMessage(send(b"x", topic="SCHEDULE_TOPIC_XXXX"), metadata=CLIENT)
        bad_tag = await stub.SendMessage(send(b"x", tag="a|b"), metadata=CLIENT)
        empty = await stub.SendMessage(spb.SendMessageRequest(), metadata=CLIENT)
        later = Timestamp(seconds=int(time.time()) + 60)
        half = await stub.SendMessage(
            send(b"x", message_type=pb.TRANSACTION, delivery_timestamp=later), metadata=CLIENT
        )
        good = await stub.SendMessage(send(b"fine"), metadata=CLIENT)
        blank_receive = [r async for r in stub.ReceiveMessage(spb.ReceiveMessageRequest(), metadata=CLIENT)]
    assert (
        too_large.status.code == pb.MESSAGE_BODY_TOO_LARGE
        and too_large.status.message == "message body cannot exceed the max 4194304"
    )
    assert bad_name.status.code == pb.ILLEGAL_TOPIC and system.status.code == pb.ILLEGAL_TOPIC
    assert bad_tag.status.code == pb.ILLEGAL_MESSAGE_TAG
    assert empty.status.code == pb.MESSAGE_CORRUPTED
    assert half.status.code == pb.ILLEGAL_DELIVERY_TIME
    assert good.status.code == pb.OK and good.entries[0].status.code == pb.OK
    assert [r.status.code for r in blank_receive] == [
        pb.ILLEGAL_TOPIC
    ]  # a status in the stream, not an RPC error
    (stored,) = await drain(server.namesrv, topic, expect=1, timeout=10)
    assert stored.body == b"fine"  # nothing refused was stored


async def test_telemetry_settings_then_heartbeat(server: ServerProcess) -> None:
    topic = unique("tele")
    await create_topic(server.broker, topic, 1)
    me = (("x-mq-client-id", unique("client")),)
    settings = pb.Settings(
        client_type=pb.PRODUCER,
        access_point=endpoints(server),
        publishing=pb.Publishing(topics=[pb.Resource(name=topic)]),
    )
    async with grpc.aio.insecure_channel(server.grpc) as channel:
        stub = spb_grpc.MessagingServiceStub(channel)
        before = await stub.Heartbeat(spb.HeartbeatRequest(client_type=pb.PRODUCER), metadata=me)
        call = stub.Telemetry(metadata=me)
        await call.write(spb.TelemetryCommand(settings=settings))
        answer = await call.read()
        after = await stub.Heartbeat(spb.HeartbeatRequest(client_type=pb.PRODUCER), metadata=me)
        bye = await stub.NotifyClientTermination(spb.NotifyClientTerminationRequest(), metadata=me)
        await call.done_writing()
        gone = await stub.Heartbeat(spb.HeartbeatRequest(client_type=pb.PRODUCER), metadata=me)
    assert before.status.code == pb.UNRECOGNIZED_CLIENT_TYPE
    assert isinstance(answer, spb.TelemetryCommand) and answer.status.code == pb.OK
    assert answer.settings.publishing.max_body_size == 4 * 1024 * 1024
    assert answer.settings.backoff_policy.max_attempts == 3
    assert after.status.code == pb.OK and bye.status.code == pb.OK
    assert gone.status.code == pb.UNRECOGNIZED_CLIENT_TYPE


async def test_tls_listener(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_pem.write_to_path(tmp_path / "key.pem")
    cert.cert_chain_pems[0].write_to_path(tmp_path / "cert.pem")
    proc = ServerProcess(
        tmp_path / "data",
        "--grpc-tls-cert",
        str(tmp_path / "cert.pem"),
        "--grpc-tls-key",
        str(tmp_path / "key.pem"),
    ).start()
    try:
        topic = unique("tls")
        await create_topic(proc.broker, topic, 1)
        credentials = grpc.ssl_channel_credentials(root_certificates=ca.cert_pem.bytes())
        async with grpc.aio.secure_channel(proc.grpc, credentials) as channel:
            stub = spb_grpc.MessagingServiceStub(channel)
            route = await stub.QueryRoute(
                spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=CLIENT
            )
        assert route.status.code == pb.OK and len(route.message_queues) == 1
    finally:
        proc.stop()


def test_grpc_options_on_the_command_line(tmp_path: Path) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tidemq", "server", *args], capture_output=True, text=True, timeout=30
        )

    assert "--grpc-port" in cli("--help").stdout
    (tmp_path / "cert.pem").write_text("x")
    half = cli("--grpc-tls-cert", str(tmp_path / "cert.pem"))
    assert half.returncode == 2 and "--grpc-tls-key" in half.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = ServerProcess(tmp_path / "d", "--grpc-port", str(port))
        result = cli(*proc.args()[4:])
    assert result.returncode == 1 and "address already in use" in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    without = ServerProcess(tmp_path / "d2", "--no-grpc", "--grpc-port", str(free_port())).start()
    try:
        assert without.proc is not None
    finally:
        without.stop()
