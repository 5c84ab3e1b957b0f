"""Network fuzzer: mutated traffic on every port of a live ``tidemq server``, then canaries on each protocol.

Seeds are captured traffic (tidemq's own remoting client and grpcio, recorded through a proxy) and frames
built with the NSQ codecs. After each port's share of frames the server must still be running, answer a
well-behaved client on every protocol, have logged no Python traceback, and keep its RSS bounded.
``make test`` sends a few thousand frames with a fixed seed; ``TIDEMQ_CHAOS=long`` (``make chaos``)
about 100,000, with the seed from TIDEMQ_FUZZ_SEED if set.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import time

import grpc
import orjson
import pytest

from tests.chaos.chaos_support import LONG
from tests.chaos.fuzz_support import Recorder, blast, mutate
from tests.support import RawClient, ServerProcess, create_topic, unique
from tidemq.grpc.proto import definition_pb2 as pb
from tidemq.grpc.proto import service_pb2 as spb
from tidemq.grpc.proto import service_pb2_grpc as spb_grpc
from tidemq.nsq.compression import Snappy
from tidemq.nsq.protocol import encode_command, encode_mpub
from tidemq.remoting.codes import RequestCode

pytestmark = [pytest.mark.e2e, pytest.mark.chaos]

SEED = int(os.environ.get("TIDEMQ_FUZZ_SEED", "23"))
FRAMES_PER_PORT = 15_000 if LONG else 700
#: RSS the server may reach under the fuzzer: the issue's documented bound with default limits.
RSS_LIMIT_MB = 512
GRPC_CLIENT = (("x-mq-client-id", "fuzz-canary@1"), ("x-mq-language", "PYTHON"))
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def remoting_frames(stream: bytes) -> list[bytes]:
    """Captured remoting traffic cut into its frames (each a seed of its own)."""
    out, pos = [], 0
    while pos + 4 <= len(stream):
        (length,) = struct.unpack_from(">i", stream, pos)
        out.append(stream[pos : pos + 4 + length])
        pos += 4 + length
    return out


async def capture_remoting(server: ServerProcess, topic: str) -> tuple[list[bytes], list[bytes]]:
    """What a producer, a consumer and an admin send to the broker and the name server."""
    async with Recorder(server.broker_port) as rec:
        c = await RawClient.open(rec.address)
        try:
            await c.create_topic(unique("fz"), 2)
            await c.send(topic, b"hello", tags="TagA", keys="k1", props={"color": "red"})
            await c.send(topic, b"v1", code=RequestCode.SEND_MESSAGE)
            await c.send_batch(topic, [b"a", b"b", b"c"])
            await c.heartbeat("fuzz-group", {topic: "TagA || TagB"})
            await c.pull(topic, 0, 0, group="fuzz-group", max_nums=4)
            await c.call(
                RequestCode.QUERY_CONSUMER_OFFSET,
                {"topic": topic, "consumerGroup": "fuzz-group", "queueId": "0"},
            )
            await c.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "fuzz-group"})
            lock = {
                "consumerGroup": "fuzz-group",
                "clientId": c.client_id,
                "mqSet": [{"topic": topic, "brokerName": "broker-a", "queueId": 0}],
            }
            await c.call(RequestCode.LOCK_BATCH_MQ, body=orjson.dumps(lock))
            await c.call(RequestCode.UNLOCK_BATCH_MQ, body=orjson.dumps(lock))
            await c.call(
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=orjson.dumps({"groupName": unique("g")})
            )
        finally:
            c.close()
    async with Recorder(server.namesrv_port) as names:
        c = await RawClient.open(names.address)
        try:
            await c.route(topic)
            await c.route(unique("nosuch"))
            await c.call(RequestCode.GET_BROKER_CLUSTER_INFO)
        finally:
            c.close()
    broker = [f for s in rec.streams for f in remoting_frames(bytes(s))]
    namesrv = [f for s in names.streams for f in remoting_frames(bytes(s))]
    return broker + [bytes(s) for s in rec.streams], namesrv + [bytes(s) for s in names.streams]


async def capture_grpc(server: ServerProcess, topic: str) -> list[bytes]:
    """What grpcio sends for a route query and a send (HTTP/2 preface, SETTINGS, HPACK headers, DATA)."""
    async with Recorder(server.grpc_port) as rec, grpc.aio.insecure_channel(rec.address) as channel:
        stub = spb_grpc.MessagingServiceStub(channel)
        await grpc_canary(stub, topic)
    return [bytes(s) for s in rec.streams if s]


async def grpc_canary(stub: spb_grpc.MessagingServiceStub, topic: str) -> None:
    route = await stub.QueryRoute(
        spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=GRPC_CLIENT, timeout=10
    )
    assert route.status.code == pb.OK, route.status
    sp = pb.SystemProperties(message_id=unique("id"), message_type=pb.NORMAL)
    msg = pb.Message(topic=pb.Resource(name=topic), body=b"canary", system_properties=sp)
    sent = await stub.SendMessage(spb.SendMessageRequest(messages=[msg]), metadata=GRPC_CLIENT, timeout=10)
    assert sent.status.code == pb.OK, sent.status


def nsqd_seeds(topic: str) -> list[bytes]:
    identify = orjson.dumps(
        {"client_id": "fuzz", "hostname": "h", "feature_negotiation": True, "heartbeat_interval": 30000}
    )
    lines = [
        encode_command("IDENTIFY", body=identify),
        encode_command("SUB", topic, "ch"),
        encode_command("RDY", "10"),
        encode_command("PUB", topic, body=b"hello"),
        encode_mpub(topic, [b"a", b"bb", b"ccc"]),
        encode_command("DPUB", topic, "1000", body=b"later"),
        encode_command("FIN", b"0123456789abcdef"),
        encode_command("REQ", b"0123456789abcdef", "100"),
        encode_command("TOUCH", b"0123456789abcdef"),
        encode_command("AUTH", body=b"secret"),
        b"NOP\n",
        b"CLS\n",
    ]
    seeds = [b"  V2" + line for line in lines]
    seeds.append(b"  V2" + b"".join(lines))
    snappy = Snappy()
    seeds.append(
        b"  V2"
        + encode_command("IDENTIFY", body=orjson.dumps({"snappy": True, "feature_negotiation": True}))
        + snappy.compress(encode_command("PUB", topic, body=b"squeezed") + b"NOP\n")
    )
    seeds.append(
        b"  V2"
        + encode_command(
            "IDENTIFY", body=orjson.dumps({"deflate": True, "deflate_level": 3, "feature_negotiation": True})
        )
    )
    return seeds


def lookupd_seeds() -> list[bytes]:
    identify = orjson.dumps(
        {"broadcast_address": "127.0.0.1", "tcp_port": 4150, "http_port": 4151, "version": "1.3.0"}
    )
    lines = [
        encode_command("IDENTIFY", body=identify),
        encode_command("REGISTER", "fuzz_topic", "ch"),
        encode_command("REGISTER", "fuzz_topic"),
        encode_command("UNREGISTER", "fuzz_topic", "ch"),
        b"PING\n",
    ]
    return [b"  V1" + line for line in lines] + [b"  V1" + b"".join(lines)]


def http_request(method: str, target: str, body: bytes = b"", extra: str = "") -> bytes:
    head = f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}Content-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def nsqd_http_seeds(topic: str) -> list[bytes]:
    return [
        http_request("POST", f"/pub?topic={topic}", b"hello"),
        http_request("POST", f"/pub?topic={topic}&defer=100", b"later"),
        http_request("POST", f"/mpub?topic={topic}", b"a\nb\nc\n"),
        http_request(
            "POST",
            f"/mpub?topic={topic}&binary=true",
            struct.pack(">I", 2) + struct.pack(">I", 1) + b"x" + struct.pack(">I", 1) + b"y",
        ),
        http_request("GET", "/ping"),
        http_request("GET", "/info"),
        http_request("GET", "/stats?format=json&topic=" + topic),
        http_request("POST", f"/topic/create?topic={unique('ht')}"),
        http_request("POST", f"/channel/create?topic={topic}&channel=c"),
        http_request("POST", f"/channel/pause?topic={topic}&channel=c"),
        http_request("POST", f"/channel/unpause?topic={topic}&channel=c"),
        http_request("POST", f"/pub?topic={topic}", b"\x1f\x8b\x08\x00", "Content-Encoding: gzip\r\n"),
        http_request("GET", "/config/nsqlookupd_tcp_addresses"),
    ]


def lookupd_http_seeds() -> list[bytes]:
    return [
        http_request("GET", "/ping"),
        http_request("GET", "/info"),
        http_request("GET", "/topics"),
        http_request("GET", "/nodes"),
        http_request("GET", "/lookup?topic=fuzz_topic"),
        http_request("GET", "/channels?topic=fuzz_topic"),
        http_request("POST", "/topic/create?topic=fuzz_http"),
        http_request("POST", "/channel/create?topic=fuzz_http&channel=c"),
        http_request("POST", "/topic/tombstone?topic=fuzz_http&node=127.0.0.1:1"),
        http_request("POST", "/channel/delete?topic=fuzz_http&channel=c"),
    ]


def nsq_reply(port: int, magic: bytes, command: bytes) -> bytes:
    """One command on a fresh connection; the data of the first answer frame."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(magic + command)
        head = b""
        while len(head) < 8:
            chunk = s.recv(8 - len(head))
            assert chunk, "connection closed before the answer"
            head += chunk
        size, kind = struct.unpack(">ii", head)
        data = b""
        while len(data) < size - 4:
            data += s.recv(size - 4 - len(data))
        assert kind == 0, (kind, data)
        return data


def http_status(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(request.replace(b"HTTP/1.1\r\n", b"HTTP/1.1\r\nConnection: close\r\n", 1))
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data.split(b"\r\n", 1)[0]


async def canaries(server: ServerProcess, topic: str, nsq_topic: str) -> None:
    """A well-behaved client on every protocol still gets served."""
    c = await RawClient.open(server.broker)
    try:
        sent = await c.send(topic, b"canary")
        assert sent.code == 0, sent
    finally:
        c.close()
    n = await RawClient.open(server.namesrv)
    try:
        assert await n.route(topic) is not None
    finally:
        n.close()
    assert nsq_reply(server.nsqd_port, b"  V2", encode_command("PUB", nsq_topic, body=b"canary")) == b"OK"
    with socket.create_connection(("127.0.0.1", server.lookupd_tcp_port), timeout=5) as s:
        s.sendall(b"  V1PING\n")  # nsqlookupd answers with a size and the data, no frame type
        assert s.recv(64) == struct.pack(">i", 2) + b"OK"
    assert b" 200 " in http_status(
        server.nsqd_http_port, http_request("POST", f"/pub?topic={nsq_topic}", b"c")
    )
    assert b" 200 " in http_status(server.lookupd_http_port, http_request("GET", "/ping"))
    async with grpc.aio.insecure_channel(server.grpc) as channel:
        await grpc_canary(spb_grpc.MessagingServiceStub(channel), topic)


def python_tracebacks(log: str) -> list[str]:
    """The tracebacks in a server log, less those printed from inside grpcio's Cython core alone.

    grpcio prints one with ``traceback.print_exc()`` (not through logging) when it cannot send an error
    status to a client that has already gone: the only frames are its own, and nothing in tidemq can
    quiet it.
    """
    found = []
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Traceback"):
            block = []
            for frame in lines[i + 1 :]:
                if not frame.startswith("  "):
                    block.append(frame)
                    break
                block.append(frame)
            files = [f for f in block if f.startswith('  File "')]
            if not files or not all(f.startswith('  File "src/python/grpcio/') for f in files):
                found.append("\n".join([line, *block]))
    return found


def fuzz_port(
    port: int, seeds: list[bytes], rng: random.Random, frames: int, keep: bytes, per_conn: int
) -> int:
    sent = 0
    while sent < frames:
        batch = [mutate(rng, seeds, keep) for _ in range(rng.randint(1, per_conn))]
        blast(port, batch, rng)
        sent += len(batch)
    return sent


async def test_fuzzed_traffic_on_every_port_leaves_the_server_serving(fresh_server: ServerProcess) -> None:
    server = fresh_server
    assert server.proc is not None
    topic = unique("fuzz")
    nsq_topic = unique("fuzz")
    await create_topic(server.broker, topic, 2, routed_by=server.namesrv)
    broker_seeds, namesrv_seeds = await capture_remoting(server, topic)
    grpc_seeds = await capture_grpc(server, topic)
    assert broker_seeds and namesrv_seeds and grpc_seeds
    log_at = server.log_path.stat().st_size
    rss_start = rss_mb(server.proc.pid)
    ports: list[tuple[str, int, list[bytes], bytes, int]] = [
        ("remoting broker", server.broker_port, broker_seeds, b"", 10),
        ("name server", server.namesrv_port, namesrv_seeds, b"", 10),
        ("nsqd TCP", server.nsqd_port, nsqd_seeds(nsq_topic), b"  V2", 10),
        ("nsqd HTTP", server.nsqd_http_port, nsqd_http_seeds(nsq_topic), b"", 3),
        ("lookupd TCP", server.lookupd_tcp_port, lookupd_seeds(), b"  V1", 10),
        ("lookupd HTTP", server.lookupd_http_port, lookupd_http_seeds(), b"", 3),
        ("gRPC", server.grpc_port, grpc_seeds, H2_PREFACE, 2),
    ]
    report: list[str] = []
    total = 0
    for name, port, seeds, keep, per_conn in ports:
        rng = random.Random(f"{SEED}-{name}")
        began = time.monotonic()
        sent = fuzz_port(port, seeds, rng, FRAMES_PER_PORT, keep, per_conn)
        total += sent
        assert server.proc.poll() is None, f"server died while fuzzing {name}"
        await canaries(server, topic, nsq_topic)
        log = server.log_path.read_bytes()[log_at:].decode(errors="replace")
        assert not python_tracebacks(log), f"traceback after fuzzing {name}:\n{python_tracebacks(log)[:3]}"
        rss = rss_mb(server.proc.pid)
        report.append(f"{name}: {sent} frames in {time.monotonic() - began:.1f}s, RSS {rss:.0f} MB")
        assert rss < RSS_LIMIT_MB, report
    print(f"\nfuzzed {total} frames (seed {SEED}), RSS {rss_start:.0f} MB at start\n" + "\n".join(report))
