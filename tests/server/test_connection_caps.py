"""Connection caps on the remoting ports (name server, broker) and nsqd's TCP port (issue 23, "What to
build" item 5), against a real ``tidemq server``: the connection past the per-IP or the total cap is
refused clearly (NSQ: an ``E_TOO_MANY_CONNECTIONS`` error frame; remoting, which has no refusal frame:
the close and one rate-limited log line), the admitted clients keep being served, and a freed place is
given again (docs/rocketmq-broker.md#connection-limits, docs/nsq-server.md#connection-limits)."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nsq.test_http_guard import connect, log_text, read_until_closed
from tests.support import ServerProcess
from tidemq.nsq.protocol import MAGIC_V2, FrameType, encode_command
from tidemq.remoting.codes import RequestCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.frame import FrameDecoder, encode

pytestmark = pytest.mark.e2e

PER_IP = 2
TOTAL = 4
#: Connections the server itself holds open to a port: the broker's registration with the name server.
OWN = {"namesrv": 1}


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("caps") / "data"
    # --no-http: the web console is a client of these ports too, and its connections would blur the counts
    proc = ServerProcess(
        data, "--max-connections-per-ip", str(PER_IP), "--max-connections", str(TOTAL), "--no-http"
    ).start()
    yield proc
    proc.stop()


def served(port: str, sock: socket.socket) -> bool:
    """Whether the server still answers a request on ``sock``."""
    if port == "nsqd":
        sock.sendall(MAGIC_V2 + encode_command("PUB", "caps", body=b"hello"))
        answer = read_until_closed(sock, 1.0)[0]
        return answer == struct.pack(">ii", 6, FrameType.RESPONSE) + b"OK"
    sock.sendall(encode(RemotingCommand(RequestCode.GET_BROKER_CLUSTER_INFO, opaque=7)))
    answer = read_until_closed(sock, 1.0)[0]
    commands = FrameDecoder().feed(memoryview(answer))
    return len(commands) == 1 and isinstance(commands[0], RemotingCommand) and commands[0].opaque == 7


def refusal(port: str, hostport: str, source: str) -> bytes:
    """What a connection past the caps is told before it is closed (it must be closed)."""
    sock = connect(hostport, source)
    try:
        if port == "nsqd":
            sock.sendall(MAGIC_V2)
        answer, closed = read_until_closed(sock, 3.0)
    finally:
        sock.close()
    assert closed, f"{port}: a connection past the caps was kept"
    return answer


@pytest.mark.parametrize("port", ["namesrv", "broker", "nsqd"])
def test_caps_refuse_clearly_and_admit_again(capped: ServerProcess, port: str) -> None:
    hostport = getattr(capped, port)
    start = capped.log_path.stat().st_size
    held = [connect(hostport, "127.0.0.2") for _ in range(PER_IP)]
    try:
        answer = refusal(port, hostport, "127.0.0.2")
        if port == "nsqd":
            assert answer[8:].startswith(b"E_TOO_MANY_CONNECTIONS"), answer
            assert struct.unpack(">ii", answer[:8]) == (len(answer) - 4, FrameType.ERROR)
        else:
            assert answer == b"", answer  # RocketMQ has no refusal frame: just the close
        # another address still gets in, up to the total; then the total refuses everyone
        for i in range(TOTAL - PER_IP - OWN.get(port, 0)):
            held.append(connect(hostport, f"127.0.0.{3 + i}"))
        answer = refusal(port, hostport, "127.0.0.9")
        assert b"E_TOO_MANY_CONNECTIONS" in answer if port == "nsqd" else answer == b"", answer
        assert all(served(port, sock) for sock in held), "an admitted client stopped being served"
        held.pop(0).close()
        time.sleep(0.3)
        held.append(connect(hostport, "127.0.0.2"))
        assert served(port, held[-1]), "a freed place is not given again"
    finally:
        for sock in held:
            sock.close()
    log = log_text(capped, start)
    assert "Traceback" not in log, log[-3000:]
    assert log.count("refused") >= 1 and "connections open" in log, log[-3000:]


def test_a_refusal_burst_logs_a_few_lines(capped: ServerProcess) -> None:
    start = capped.log_path.stat().st_size
    held = [connect(capped.broker, "127.0.0.5") for _ in range(PER_IP)]
    try:
        for _ in range(60):
            sock = connect(capped.broker, "127.0.0.5")
            assert read_until_closed(sock, 3.0)[1]
            sock.close()
    finally:
        for sock in held:
            sock.close()
    time.sleep(1.5)  # the suppressed count is written a second later
    log = log_text(capped, start)
    assert "Traceback" not in log, log[-3000:]
    refused = [line for line in log.splitlines() if "refused" in line or "suppressed" in line]
    assert 1 <= len(refused) <= 20, f"{len(refused)} lines for 60 refusals:\n{log[-3000:]}"
    assert "suppressed" in log


@pytest.mark.parametrize("command", ["namesrv", "broker", "nsqd"])
def test_each_command_takes_the_caps(tmp_path: Path, command: str) -> None:
    """``tidemq namesrv``, ``tidemq broker`` and ``tidemq nsqd`` cap their own port."""
    namesrv = ServerProcess(tmp_path / "ns", command="namesrv").start() if command == "broker" else None
    extra = ["--namesrv", namesrv.namesrv] if namesrv is not None else []
    proc = ServerProcess(tmp_path / "data", *extra, "--max-connections-per-ip", "1", command=command).start()
    try:
        hostport = {"namesrv": proc.namesrv, "broker": proc.broker, "nsqd": proc.nsqd}[command]
        port = "nsqd" if command == "nsqd" else "remoting"
        held = connect(hostport)
        answer = refusal(port, hostport, "127.0.0.1")
        assert answer.startswith(struct.pack(">i", len(answer) - 4)) if port == "nsqd" else answer == b""
        assert served(port, held)
        held.close()
    finally:
        proc.stop()
        if namesrv is not None:
            namesrv.stop()


#: An HTTP/2 client's connection preface and an empty SETTINGS frame: a gRPC server answers its own SETTINGS.
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")


def grpc_connection(hostport: str, source: str) -> socket.socket:
    sock = connect(hostport, source)
    with contextlib.suppress(OSError):  # a refused connection may be closed before the preface is sent
        sock.sendall(HTTP2_PREFACE)
    return sock


def http2_settings(sock: socket.socket) -> bool:
    """Whether the server answered with its SETTINGS frame and kept the connection."""
    answer, closed = read_until_closed(sock, 0.5)
    return not closed and len(answer) >= 9 and answer[3] == 4


def test_grpc_port_caps_its_connections_in_total(capped: ServerProcess) -> None:
    """grpc core counts connections in total only: --max-connections caps the gRPC port too."""
    held = [grpc_connection(capped.grpc, f"127.0.0.{10 + i}") for i in range(TOTAL)]
    try:
        assert all(http2_settings(sock) for sock in held)
        refused = grpc_connection(capped.grpc, "127.0.0.20")
        answer, closed = read_until_closed(refused, 3.0)
        refused.close()
        assert closed and answer == b"", answer
        held.pop(0).close()
        time.sleep(0.3)
        held.append(grpc_connection(capped.grpc, "127.0.0.20"))
        assert http2_settings(held[-1]), "a freed place is not given again"
    finally:
        for sock in held:
            sock.close()
