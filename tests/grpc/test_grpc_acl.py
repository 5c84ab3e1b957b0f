"""The plain ACL on the gRPC endpoint of ``tidemq server --acl-file``: the official Python SDK with
Credentials(ak, sk) sends; a wrong secret, no credentials and an account without PUB are refused with the
proxy's codes, and nothing they sent is stored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.support import ServerProcess, eventually, unique
from tidemq.client import api
from tidemq.client.config import ClientConfig
from tidemq.client.consumer import ConsumeFromWhere
from tidemq.client.consumer.lite_pull import LitePullConsumer
from tidemq.grpc.auth import sign
from tidemq.grpc.proto import definition_pb2 as pb
from tidemq.grpc.proto import service_pb2 as spb
from tidemq.grpc.proto import service_pb2_grpc as spb_grpc
from tidemq.remoting.acl_signature import sign_request
from tidemq.remoting.codes import ResponseCode
from tidemq.remoting.transport import connect

pytestmark = pytest.mark.e2e

SDK_PRODUCER = Path(__file__).with_name("sdk_producer.py")
TOPIC = unique("GrpcAcl")
ACL = f"""\
accounts:
  - accessKey: grpcadmin
    secretKey: admin-secret
    admin: true
  - accessKey: grpcwriter
    secretKey: writer-secret
    defaultTopicPerm: DENY
    topicPerms:
      - {TOPIC}=PUB|SUB
  - accessKey: grpcreader
    secretKey: reader-secret
    defaultTopicPerm: DENY
    topicPerms:
      - {TOPIC}=SUB
"""


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("grpc-acl")
    acl = folder / "plain_acl.yml"
    acl.write_text(ACL)
    proc = ServerProcess(folder / "data", "--acl-file", str(acl)).start()
    yield proc
    proc.stop()


async def create_signed_topic(server: ServerProcess) -> None:
    host, port = server.broker.rsplit(":", 1)
    conn = await connect(host, int(port))
    try:
        request = api.create_topic_request(TOPIC, 2, 6)
        sign_request(request, "grpcadmin", "admin-secret")
        resp = await conn.invoke(request, timeout=5.0)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    finally:
        conn.close()


def sdk_send(server: ServerProcess, body: str, ak: str = "", sk: str = "") -> tuple[int, list[Any], str]:
    proc = subprocess.run(
        [sys.executable, str(SDK_PRODUCER), server.grpc, TOPIC, json.dumps([{"body": body}])],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "SDK_AK": ak, "SDK_SK": sk},
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc.returncode, lines, proc.stderr


async def test_sdk_with_credentials_sends_and_the_refused_store_nothing(acl_server: ServerProcess) -> None:
    await create_signed_topic(acl_server)
    code, lines, err = sdk_send(acl_server, "signed", "grpcwriter", "writer-secret")
    assert code == 0 and lines and lines[0]["ok"], (lines, err[-2000:])

    for body, ak, sk in (
        ("wrong-secret", "grpcwriter", "not-the-secret"),
        ("anonymous", "", ""),
        ("read-only", "grpcreader", "reader-secret"),
    ):
        code, lines, err = sdk_send(acl_server, body, ak, sk)
        assert code != 0 or not lines or not lines[0]["ok"], (body, lines)

    log = acl_server.log_path.read_text(errors="replace")
    assert "Check signature failed for accessKey=grpcwriter" in log
    assert "No accessKey is configured" in log
    assert f"No default permission for topic:{TOPIC}, accessKey=grpcreader" in log

    config = ClientConfig(namesrv_addr=acl_server.namesrv, credentials=("grpcadmin", "admin-secret"))
    consumer = LitePullConsumer(unique("CG"), config=config, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(TOPIC, "*")
    await consumer.start()
    try:
        bodies: list[bytes] = []

        async def got_it() -> bool:
            bodies.extend(m.body for m in await consumer.poll(timeout=0.5))
            return bool(bodies)

        await eventually(got_it, 20, "the signed send is stored")
        bodies.extend(m.body for m in await consumer.poll(timeout=1.0))
        assert bodies == [b"signed"]
    finally:
        await consumer.shutdown()


async def test_raw_calls_get_unauthorized_and_forbidden(acl_server: ServerProcess) -> None:
    date = "20250101T120000Z"

    def headers(ak: str, signature: str) -> tuple[tuple[str, str], ...]:
        auth = f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={signature}"
        return (("x-mq-client-id", "acl-test@1"), ("x-mq-date-time", date), ("authorization", auth))

    route = spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC), endpoints=pb.Endpoints())
    send = spb.SendMessageRequest(
        messages=[
            pb.Message(
                topic=pb.Resource(name=TOPIC),
                body=b"raw",
                system_properties=pb.SystemProperties(message_id="raw-1", message_type=pb.NORMAL),
            )
        ]
    )
    async with grpc.aio.insecure_channel(acl_server.grpc) as channel:
        stub = spb_grpc.MessagingServiceStub(channel)
        bare = await stub.QueryRoute(route, metadata=(("x-mq-client-id", "acl-test@1"),))
        assert bare.status.code == pb.UNAUTHORIZED and "authorization" in bare.status.message
        stranger = await stub.QueryRoute(route, metadata=headers("nobody", sign("x", date)))
        assert (stranger.status.code, stranger.status.message) == (
            pb.UNAUTHORIZED,
            "No acl config for nobody",
        )
        forged = await stub.SendMessage(send, metadata=headers("grpcwriter", sign("nope", date)))
        assert forged.status.code == pb.UNAUTHORIZED
        assert forged.status.message == "Check signature failed for accessKey=grpcwriter"
        reader = await stub.SendMessage(send, metadata=headers("grpcreader", sign("reader-secret", date)))
        assert reader.status.code == pb.FORBIDDEN
        assert (
            reader.status.message
            == f"SendMessage: No default permission for topic:{TOPIC}, accessKey=grpcreader"
        )
        allowed = await stub.QueryRoute(route, metadata=headers("grpcreader", sign("reader-secret", date)))
        assert allowed.status.code == pb.OK
        settings = spb.TelemetryCommand(
            settings=pb.Settings(
                client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name=TOPIC)])
            )
        )

        async def commands() -> Any:
            yield settings

        answers = [
            c
            async for c in stub.Telemetry(
                commands(), metadata=headers("grpcreader", sign("reader-secret", date))
            )
        ]
        assert [a.status.code for a in answers] == [pb.FORBIDDEN]
