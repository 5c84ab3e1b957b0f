"""What one NSQ client can make the server hold (issue 23, findings 1, 2 and 6), measured on a real
``tidemq server`` with its defaults: RSS from /proc/<pid>/status, bounds generous and documented in
docs/nsq-server.md#memory-bounds.

- An idle channel holds at most ``--mem-queue-bytes`` of messages in memory (the rest stays in the store
  and is read back when a consumer comes): 600 x 1 MiB took RSS from 51 to 668 MB before.
- An MPUB of 1,000,000 x 1 B is decoded and stored in chunks that yield to the loop, so that a canary's
  PUB round trips on another connection stay short and RSS bounded (measured before: 3.0 s worst round
  trip, +532 MB; after: 67 ms, +19 MB).
- A subscriber that never reads gets no more than about its output bound written to it (+194 MB before).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
import urllib.request
from pathlib import Path

import orjson
import pytest

from tests.nsq_support import RawNsq
from tests.support import ServerProcess, unique
from tidemq.nsq.protocol import MAGIC_V2

pytestmark = pytest.mark.e2e

MIB = 1024 * 1024


def rss_mb(proc: ServerProcess, field: str = "VmRSS") -> float:
    """The server's resident memory; ``RssAnon`` leaves out the commit log's pages the store maps (page
    cache, which the kernel takes back), which a consumer reading the log makes resident."""
    assert proc.proc is not None
    for line in Path(f"/proc/{proc.proc.pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def http_post(proc: ServerProcess, path: str) -> bytes:
    request = urllib.request.Request(f"http://{proc.nsqd_http}{path}", data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return bytes(answer.read())


def topic_stats(proc: ServerProcess, topic: str) -> dict[str, object]:
    with urllib.request.urlopen(f"http://{proc.nsqd_http}/stats?format=json&topic={topic}", timeout=10) as a:
        stats = orjson.loads(a.read())
    found: list[dict[str, object]] = [t for t in stats["topics"] if t["topic_name"] == topic]
    return found[0]


@pytest.fixture
def server(tmp_path: Path) -> ServerProcess:
    proc = ServerProcess(tmp_path / "data").start()
    yield proc  # type: ignore[misc]
    proc.kill()


async def test_idle_channel_holds_bounded_bytes_and_delivers_everything_later(server: ServerProcess) -> None:
    """Finding 1: 600 x 1 MiB to a topic with an idle channel; RSS grows by under 200 MB (the channel's
    budget is 16 MiB), and a consumer that comes later gets all 600, in order, read back from the store."""
    topic = unique("memq")
    http_post(server, f"/topic/create?topic={topic}")
    http_post(server, f"/channel/create?topic={topic}&channel=idle")
    before = rss_mb(server)
    producer = await RawNsq.open(server.nsqd)
    body = b"x" * (MIB - 8)
    for start in range(0, 600, 50):
        for i in range(start, start + 50):
            producer.send("PUB", topic, body=b"%08d" % i + body)
        for _ in range(50):
            assert await producer.response(30) == b"OK"
    grown = rss_mb(server) - before
    assert grown < 200, f"RSS grew {grown:.0f} MB holding an idle channel's 600 MiB"

    consumer = await RawNsq.open(server.nsqd)
    await consumer.sub(topic, "idle", rdy=20)
    seen = []
    for _ in range(600):
        msg = await consumer.message(30)
        seen.append(int(msg.body[:8]))
        consumer.send("FIN", msg.id)
    assert seen == list(range(600))
    producer.close()
    consumer.close()


def _mpub_body(count: int, size: int) -> bytes:
    message = struct.pack(">i", size) + b"m" * size
    return struct.pack(">i", count) + message * count


async def _canary(addr: str, topic: str, stop: asyncio.Event) -> list[float]:
    """PUB round trips one after another until ``stop``; their durations."""
    canary = await RawNsq.open(addr)
    trips = []
    while not stop.is_set():
        started = time.monotonic()
        assert await canary.pub(topic, b"canary") == b"OK"
        trips.append(time.monotonic() - started)
        await asyncio.sleep(0.005)
    canary.close()
    return trips


async def test_big_mpub_of_tiny_messages_neither_stalls_the_loop_nor_takes_memory(
    server: ServerProcess,
) -> None:
    """Finding 2: one MPUB of 1,000,000 x 1 B (5 MB, nsqd's limits allow it) while a canary PUBs on
    another connection: the canary's worst round trip stays under 1 s (2.4 s before; the docs give the
    measured figure), peak RSS growth under 250 MB (about 470 MB before), and all million are stored."""
    topic, canary_topic = unique("mpub"), unique("canary")
    publisher = await RawNsq.open(server.nsqd)
    assert await publisher.pub(topic, b"first") == b"OK"
    before = rss_mb(server)
    stop = asyncio.Event()
    canary = asyncio.create_task(_canary(server.nsqd, canary_topic, stop))
    await asyncio.sleep(0.3)
    publisher.send_raw(b"MPUB " + topic.encode() + b"\n" + struct.pack(">i", 5_000_004))
    publisher.send_raw(_mpub_body(1_000_000, 1))
    answer = asyncio.create_task(publisher.response(60))
    peak = before
    while not answer.done():
        peak = max(peak, rss_mb(server))
        await asyncio.sleep(0.02)
    assert answer.result() == b"OK"
    await asyncio.sleep(0.3)
    stop.set()
    trips = await canary
    worst = max(trips)
    print(f"canary: {len(trips)} round trips, worst {worst * 1000:.0f} ms; RSS peak +{peak - before:.0f} MB")
    assert worst < 1.0, f"the canary's PUB waited {worst:.2f} s behind the MPUB"
    assert peak - before < 250, f"RSS grew {peak - before:.0f} MB for a 5 MB MPUB"
    assert topic_stats(server, topic)["message_count"] == 1_000_001
    publisher.close()


async def test_big_mpub_is_delivered_whole_and_in_order(server: ServerProcess) -> None:
    """A chunked MPUB is seen by a subscribed channel only once every chunk is stored, in order."""
    topic = unique("mpubwhole")
    consumer = await RawNsq.open(server.nsqd)
    await consumer.sub(topic, "c", rdy=2500)
    publisher = await RawNsq.open(server.nsqd)
    bodies = [b"%07d" % i for i in range(40_000)]
    assert await publisher.mpub(topic, bodies) == b"OK"
    got = await consumer.drain(2.0, limit=40_000)
    assert got == bodies
    publisher.close()
    consumer.close()


async def _non_reading_subscriber(addr: str) -> tuple[socket.socket, asyncio.StreamWriter]:
    host, port = addr.rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
    _, writer = await asyncio.open_connection(sock=sock, limit=4096)
    writer.write(MAGIC_V2)
    return sock, writer


async def test_subscriber_that_never_reads_gets_bounded_output(server: ServerProcess) -> None:
    """Finding 6: 3,000 x 64 KiB waiting and a subscriber with RDY 2500 that never reads: RSS grows by
    under 100 MB while it stays connected (+194 MB before), and a reading consumer on another channel
    gets everything meanwhile."""
    topic = unique("slow")
    body = b"s" * (64 * 1024)
    http_post(server, f"/topic/create?topic={topic}")
    http_post(server, f"/channel/create?topic={topic}&channel=slow")
    http_post(server, f"/channel/create?topic={topic}&channel=fast")
    publisher = await RawNsq.open(server.nsqd)
    for _ in range(0, 3000, 60):
        assert await publisher.mpub(topic, [body] * 60) == b"OK"
    before, anon_before = rss_mb(server), rss_mb(server, "RssAnon")
    _, writer = await _non_reading_subscriber(server.nsqd)
    from tidemq.nsq.protocol import encode_command

    writer.write(encode_command("SUB", topic, "slow") + encode_command("RDY", "2500"))
    peak = before
    for _ in range(40):
        await asyncio.sleep(0.1)
        peak = max(peak, rss_mb(server))
    print(f"RSS peak +{peak - before:.0f} MB with a subscriber that never reads")
    assert peak - before < 100, f"RSS grew {peak - before:.0f} MB for a subscriber that never reads"
    fast = await RawNsq.open(server.nsqd)
    await fast.sub(topic, "fast", rdy=100)
    assert len(await fast.drain(2.0, limit=3000)) == 3000
    anon = rss_mb(server, "RssAnon") - anon_before
    print(f"RssAnon +{anon:.0f} MB once a reading consumer took all 3,000 meanwhile")
    assert anon < 100, f"RssAnon grew {anon:.0f} MB"
    writer.close()
    publisher.close()
    fast.close()
