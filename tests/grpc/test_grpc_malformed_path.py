"""A gRPC call whose method path is not UTF-8 (found by tests/chaos/test_fuzz_network.py): grpcio's aio
server loop dies on it, which took the whole gRPC endpoint down while the process lived on."""

from __future__ import annotations

import contextlib
import socket
import struct

import grpc
import pytest

from tests.support import ServerProcess, create_topic, eventually, unique
from tidemq.grpc.proto import definition_pb2 as pb
from tidemq.grpc.proto import service_pb2 as spb
from tidemq.grpc.proto import service_pb2_grpc as spb_grpc

pytestmark = pytest.mark.e2e

CLIENT = (("x-mq-client-id", "malformed-test@1"), ("x-mq-language", "PYTHON"))


def _literal(name: bytes, value: bytes) -> bytes:
    """An HPACK literal header field without indexing, new name, no Huffman coding."""
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def http2_call(path: bytes) -> bytes:
    """A whole HTTP/2 gRPC call, built by hand so its ``:path`` can be any bytes."""
    block = (
        b"\x83\x86"  # :method POST, :scheme http (static table)
        + b"\x04" + bytes([len(path)]) + path  # :path, literal value
        + _literal(b":authority", b"127.0.0.1")
        + _literal(b"content-type", b"application/grpc")
        + _literal(b"te", b"trailers")
    )  # fmt: skip
    headers = struct.pack(">I", len(block))[1:] + b"\x01\x04" + struct.pack(">I", 1) + block
    data = struct.pack(">I", 5)[1:] + b"\x00\x01" + struct.pack(">I", 1) + b"\x00" * 5
    settings = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
    return b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + settings + headers + data


async def test_a_non_utf8_method_path_does_not_take_the_endpoint_down(fresh_server: ServerProcess) -> None:
    topic = unique("badpath")
    await create_topic(fresh_server.broker, topic, 1)
    log_at = fresh_server.log_path.stat().st_size
    with socket.create_connection(("127.0.0.1", fresh_server.grpc_port), timeout=5) as s:
        s.sendall(http2_call(b"/ap\xe1che.rocketmq.v2.MessagingService/QueryRoute"))
        s.settimeout(1)
        with contextlib.suppress(OSError):
            s.recv(4096)

    async def route_ok() -> bool:
        async with grpc.aio.insecure_channel(fresh_server.grpc) as channel:
            stub = spb_grpc.MessagingServiceStub(channel)
            try:
                reply = await stub.QueryRoute(
                    spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=CLIENT, timeout=3
                )
            except grpc.aio.AioRpcError:
                return False
        return reply.status.code == pb.OK

    await eventually(route_ok, timeout=10, what="the gRPC endpoint serving again")
    log = fresh_server.log_path.read_bytes()[log_at:]
    assert b"Traceback" not in log, log.decode(errors="replace")[-3000:]
