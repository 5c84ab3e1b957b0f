"""nsqd's TCP port closes the clients that hold a connection without using it (issue 23, "What to build"
item 5), against a real ``tidemq nsqd`` with a 1 s heartbeat negotiated by IDENTIFY, as nsqd does:

- a client that sends nothing for two heartbeat intervals is closed (nsqd's read deadline);
- a subscriber that sends NOPs but never reads is disconnected once its writes stay blocked for a heartbeat
  interval (nsqd's write deadline), and the other clients keep being served
  (docs/nsq-server.md#memory-bounds, #connection-limits).
"""

from __future__ import annotations

import socket
import struct
import time

import orjson
import pytest

from tests.nsq.nsqd.test_nsqd_memory import http_post
from tests.nsq.test_http_guard import connect, log_text, read_until_closed
from tests.nsq_support import RawNsq
from tests.support import ServerProcess, unique
from tidemq.nsq.protocol import HEARTBEAT, MAGIC_V2, FrameType, encode_command

pytestmark = pytest.mark.e2e

HEARTBEAT_MS = 1000


def identify(sock: socket.socket) -> None:
    body = orjson.dumps({"heartbeat_interval": HEARTBEAT_MS})
    sock.sendall(MAGIC_V2 + encode_command("IDENTIFY", body=body))


def test_a_silent_client_is_closed_after_two_missed_heartbeats(nsqd: ServerProcess) -> None:
    sock = connect(nsqd.nsqd)
    identify(sock)
    t0 = time.monotonic()
    answer, closed = read_until_closed(sock, 10.0)
    elapsed = time.monotonic() - t0
    sock.close()
    assert closed, "a client that sent nothing was kept"
    assert 2 * HEARTBEAT_MS / 1000 * 0.8 <= elapsed < 8, f"closed after {elapsed:.1f} s"
    heartbeat = struct.pack(">ii", 4 + len(HEARTBEAT), FrameType.RESPONSE) + HEARTBEAT
    assert heartbeat in answer, answer[-200:]


def test_a_client_that_sends_nops_is_kept(nsqd: ServerProcess) -> None:
    sock = connect(nsqd.nsqd)
    identify(sock)
    for _ in range(8):  # 4 s: twice the read deadline
        time.sleep(0.5)
        sock.sendall(encode_command("NOP"))
    assert not read_until_closed(sock, 0.5)[1]
    sock.close()


async def test_a_subscriber_that_never_reads_is_disconnected_and_others_are_served(
    nsqd: ServerProcess,
) -> None:
    topic = unique("stalled")
    http_post(nsqd, f"/topic/create?topic={topic}")
    for channel in ("stalled", "reading"):  # both get every message published from now on
        http_post(nsqd, f"/channel/create?topic={topic}&channel={channel}")
    publisher = await RawNsq.open(nsqd.nsqd)
    body = b"w" * (64 * 1024)
    for _ in range(0, 400, 50):  # 25 MiB waiting for the subscriber
        assert await publisher.mpub(topic, [body] * 50) == b"OK"
    start = nsqd.log_path.stat().st_size
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.settimeout(5)
    stalled.connect(("127.0.0.1", nsqd.nsqd_port))
    identify(stalled)
    stalled.sendall(encode_command("SUB", topic, "stalled") + encode_command("RDY", "2500"))
    # It keeps talking (NOPs: no missed heartbeat) and never reads.
    closed = False
    deadline = time.monotonic() + 30
    while not closed and time.monotonic() < deadline:
        time.sleep(0.3)
        try:
            stalled.sendall(encode_command("NOP"))
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            closed = True
    stalled.close()
    log = log_text(nsqd, start)
    assert closed, f"a subscriber that never read was kept:\n{log[-2000:]}"
    assert f"read nothing for {HEARTBEAT_MS} ms" in log, log[-2000:]
    assert "Traceback" not in log, log[-2000:]
    consumer = await RawNsq.open(nsqd.nsqd)
    await consumer.sub(topic, "reading", rdy=100)
    assert len(await consumer.drain(3.0, limit=400)) == 400
    assert await publisher.pub(topic, b"after") == b"OK"
    consumer.close()
    publisher.close()
