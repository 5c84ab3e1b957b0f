"""Abusive HTTP and lookupd clients against a real ``tidemq server`` (issue 23, findings 7 and 8):
malformed requests, oversized bodies, idle and slow connections, too many connections, memory after many
idle connections (docs/nsq-server.md#connection-limits)."""

from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.support import ServerProcess

pytestmark = pytest.mark.e2e

IDLE_S = 1.0
PER_IP = 4
TOTAL = 6


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server with a short idle timeout and small connection caps on its NSQ HTTP and lookupd ports."""
    data = tmp_path_factory.mktemp("guard") / "data"
    proc = ServerProcess(
        data,
        "--idle-timeout",
        f"{IDLE_S:g}s",
        "--max-connections-per-ip",
        str(PER_IP),
        "--max-connections",
        str(TOTAL),
        "--no-grpc",
    ).start()
    yield proc
    proc.stop()


def _addr(hostport: str) -> tuple[str, int]:
    host, _, port = hostport.rpartition(":")
    return host, int(port)


def connect(hostport: str, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # no TIME_WAIT pile-up
    sock.bind((source, 0))
    sock.settimeout(10)
    sock.connect(_addr(hostport))
    return sock


def read_until_closed(sock: socket.socket, timeout: float) -> tuple[bytes, bool]:
    """What the server sends, and whether it closed the connection within ``timeout``."""
    data = b""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([sock], [], [], left)
        if not ready:
            break
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data, True
        if not chunk:
            return data, True
        data += chunk
    return data, False


def exchange(hostport: str, request: bytes, timeout: float = 5.0) -> bytes:
    sock = connect(hostport)
    try:
        sock.sendall(request)
        return read_until_closed(sock, timeout)[0]
    finally:
        sock.close()


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.") else 0


def json_message(answer: bytes) -> str:
    return str(orjson.loads(answer.partition(b"\r\n\r\n")[2])["message"])


def log_text(server: ServerProcess, start: int) -> str:
    return server.log_path.read_bytes()[start:].decode(errors="replace")


def test_malformed_requests_get_4xx_without_tracebacks(guarded: ServerProcess) -> None:
    start = guarded.log_path.stat().st_size
    rounds = 40
    for _ in range(rounds):
        for port in (guarded.nsqd_http, guarded.lookupd_http):
            long_path = b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            answer = exchange(port, long_path)
            assert status_of(answer) == 404 and json_message(answer) == "NOT_FOUND", answer[:200]
            huge_line = b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
            assert status_of(exchange(port, huge_line)) == 431
            assert status_of(exchange(port, b"GARBAGE\r\n\r\n")) == 400
            bad_chunks = b"POST /pub?topic=t HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"
            assert 400 <= status_of(exchange(port, bad_chunks)) < 500
            left = connect(port)  # a client leaving mid-body
            left.sendall(b"POST /pub?topic=t HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\nhello")
            left.close()
    # nsqd stores a body as sent: Content-Encoding is not decoded, so a plain body marked gzip is no error
    gzip = b"POST /pub?topic=gz HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: 5\r\n"
    assert exchange(guarded.nsqd_http, gzip + b"Connection: close\r\n\r\nhello").endswith(b"OK")
    time.sleep(1.5)  # the last suppressed count is written a second later
    log = log_text(guarded, start)
    assert "Traceback" not in log, log[-3000:]
    lines = log.count("\n")
    assert lines <= 60, f"{lines} log lines for {rounds * 10} bad requests:\n{log[-3000:]}"
    assert "suppressed" in log


def test_oversized_pub_is_refused_before_its_body_is_read(guarded: ServerProcess) -> None:
    for path, size, message in (
        (b"/pub?topic=big", 1_048_577, "MSG_TOO_BIG"),
        (b"/mpub?topic=big", 5_242_881, "BODY_TOO_BIG"),
    ):
        sock = connect(guarded.nsqd_http)
        head = (
            b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(size).encode() + b"\r\n\r\n"
        )
        sock.sendall(head + b"x" * 1000)  # the rest never comes
        answer, closed = read_until_closed(sock, 5.0)
        sock.close()
        assert status_of(answer) == 413 and json_message(answer) == message, answer
        assert closed, "the server waited for (or read) the rest of the body"


def test_chunked_mpub_past_the_body_limit_is_cut_off(guarded: ServerProcess) -> None:
    """Without a length the body is read up to --max-body-size, not further."""
    sock = connect(guarded.nsqd_http)
    sock.sendall(b"POST /mpub?topic=big HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"y" * 65535 + b"\n"
    framed = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    sent = 0
    sock.setblocking(False)
    answer = b""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and sent < 64 * 1024 * 1024:
        readable, writable, _ = select.select([sock], [sock], [], 1)
        if readable:
            answer = read_until_closed(sock, 5.0)[0]
            break
        if writable:
            try:
                sent += sock.send(framed)
            except (BlockingIOError, ConnectionResetError, BrokenPipeError):
                continue
    sock.close()
    assert status_of(answer) == 413 and json_message(answer) == "BODY_TOO_BIG", answer
    assert sent < 5_242_880 + 16 * 1024 * 1024, f"{sent} bytes taken before the refusal"


@pytest.mark.parametrize("port", ["nsqd_http", "lookupd_http", "lookupd_tcp"])
def test_idle_connections_are_closed(guarded: ServerProcess, port: str) -> None:
    hostport = getattr(guarded, port)
    silent = connect(hostport)
    slow = connect(hostport)
    first = b"  V1" if port == "lookupd_tcp" else b"GET /ping HTTP/1.1\r\nHo"  # then nothing more
    slow.sendall(first)
    t0 = time.monotonic()
    for sock in (silent, slow):
        _, closed = read_until_closed(sock, IDLE_S + 4)
        assert closed, f"{port}: an idle connection was kept"
        sock.close()
    assert time.monotonic() - t0 >= IDLE_S * 0.8


def test_keep_alive_connection_is_closed_when_idle(guarded: ServerProcess) -> None:
    sock = connect(guarded.nsqd_http)
    sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
    answer, closed = read_until_closed(sock, IDLE_S + 4)
    sock.close()
    assert status_of(answer) == 200 and closed


def test_lookupd_keeps_a_pinging_nsqd(guarded: ServerProcess) -> None:
    sock = connect(guarded.lookupd_tcp)
    sock.sendall(b"  V1")
    for _ in range(4):  # 2 s of PINGs, twice the idle timeout
        sock.sendall(b"PING\n")
        assert read_until_closed(sock, IDLE_S / 2)[0] == struct.pack(">i", 2) + b"OK"
    sock.close()


@pytest.mark.parametrize("port", ["nsqd_http", "lookupd_http", "lookupd_tcp"])
def test_connection_caps_refuse_clearly(guarded: ServerProcess, port: str) -> None:
    hostport = getattr(guarded, port)
    held = [connect(hostport) for _ in range(PER_IP)]
    try:
        answer, closed = read_until_closed(connect(hostport), 3.0)
        assert closed
        if port == "lookupd_tcp":
            assert answer[4:].startswith(b"E_TOO_MANY_CONNECTIONS"), answer
        else:
            assert status_of(answer) == 503 and json_message(answer) == "TOO_MANY_CONNECTIONS", answer
        # another address still gets in, up to the total
        held += [connect(hostport, "127.0.0.2") for _ in range(TOTAL - PER_IP)]
        time.sleep(0.2)
        assert not read_until_closed(held[-1], 0.2)[1]
        answer, closed = read_until_closed(connect(hostport, "127.0.0.3"), 3.0)
        assert closed and b"TOO_MANY_CONNECTIONS" in answer, answer
        held.pop(0).close()
        time.sleep(0.3)
        again = connect(hostport)
        assert not read_until_closed(again, 0.3)[1], "a freed place is given again"
        again.close()
    finally:
        for sock in held:
            sock.close()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_memory_of_idle_connections_is_reused(tmp_path: Path) -> None:
    """The memory of closed connections stays with the process (CPython's allocator keeps its arenas) but
    is reused: a second wave of as many connections does not grow RSS."""
    proc = ServerProcess(
        tmp_path / "data", "--max-connections-per-ip", "0", "--max-connections", "0", "--no-grpc"
    )
    proc.start()
    try:
        assert proc.proc is not None
        pid = proc.proc.pid
        base = rss_mb(pid)
        after = []
        for wave in range(2):
            socks = [connect(proc.nsqd_http, f"127.0.0.{wave + 2}") for _ in range(1500)]
            time.sleep(1.0)
            peak = rss_mb(pid)
            for sock in socks:
                sock.close()
            time.sleep(2.0)
            after.append(rss_mb(pid))
            assert peak - base < 100, f"1500 idle connections took {peak - base:.0f} MB"
        assert after[1] - after[0] < 8, f"RSS {base:.0f} -> {after[0]:.0f} -> {after[1]:.0f} MB"
    finally:
        proc.stop()
