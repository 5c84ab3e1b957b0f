"""A request whose protobuf body does not parse is the caller's fault: INVALID_ARGUMENT, a log line a second
at most, and the endpoint goes on serving (issue 23, "Bad bodies get protocol errors, never tracebacks")."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import grpc
import pytest

from tests.support import ServerProcess, create_topic, unique
from tidemq.grpc.proto import definition_pb2 as pb
from tidemq.grpc.proto import service_pb2 as spb
from tidemq.grpc.proto import service_pb2_grpc as spb_grpc

pytestmark = pytest.mark.e2e

CLIENT = (("x-mq-client-id", "unparseable-test@1"), ("x-mq-language", "PYTHON"))
SERVICE = "/apache.rocketmq.v2.MessagingService"
#: A truncated varint: no protobuf message parses from it.
NOT_A_MESSAGE = b"\xff\xff\xff"
#: A bound on each call, generous for a loaded machine: what is checked is the status, not the time.
DEADLINE_S = 30


async def test_unparseable_requests_are_invalid_argument(fresh_server: ServerProcess) -> None:
    topic = unique("unparse")
    await create_topic(fresh_server.broker, topic, 1)
    log_at = fresh_server.log_path.stat().st_size
    started = time.monotonic()
    async with grpc.aio.insecure_channel(fresh_server.grpc) as channel:
        query_route = channel.unary_unary(f"{SERVICE}/QueryRoute")  # bytes in, bytes out
        for _ in range(20):
            with pytest.raises(grpc.aio.AioRpcError) as unary:
                await query_route(NOT_A_MESSAGE, metadata=CLIENT, timeout=DEADLINE_S)
            assert unary.value.code() == grpc.StatusCode.INVALID_ARGUMENT, unary.value

        async def bad_commands() -> AsyncIterator[bytes]:
            yield NOT_A_MESSAGE

        telemetry = channel.stream_stream(f"{SERVICE}/Telemetry")
        call = telemetry(bad_commands(), metadata=CLIENT, timeout=DEADLINE_S)
        with pytest.raises(grpc.aio.AioRpcError) as stream:
            async for _ in call:
                pass
        assert stream.value.code() == grpc.StatusCode.INVALID_ARGUMENT, stream.value
        ended = time.monotonic()

        stub = spb_grpc.MessagingServiceStub(channel)
        reply = await stub.QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=CLIENT, timeout=DEADLINE_S
        )
        assert reply.status.code == pb.OK
    log = fresh_server.log_path.read_bytes()[log_at:].decode(errors="replace")
    assert "Traceback" not in log, log[-3000:]
    lines = [line for line in log.splitlines() if "does not parse" in line]
    # 21 refusals, a line at most per second of the (system-wide) monotonic clock they fell in
    assert len(lines) <= int(ended) - int(started) + 1, (ended - started, lines)
