"""Issue 23 findings 3 and 6 (remoting): one connection cannot make the broker hold unbounded state.

Against a real ``tidemq server``: a socket pipelining 100,000 suspended pulls gets the pulls past the
per-connection hold limit answered SYSTEM_BUSY, and closing it does not stall another client; a socket
that pipelines pulls for big messages and never reads its answers costs a bounded amount of memory.
RSS is the server's VmRSS from /proc; the bounds are generous (docs/rocketmq-broker.md#connection-limits).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.support import RawClient, ServerProcess, create_topic, tally_answers, unique
from tidemq.client import api
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.frame import encode

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

MIB = 1024 * 1024


def rss_mb(server: ServerProcess) -> float:
    assert server.proc is not None
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def pull_frame(topic: str, opaque: int, *, offset: int, suspend_ms: int, max_nums: int = 32) -> bytes:
    header = api.pull_header("G_limits", topic, 0, offset, max_nums=max_nums, suspend_ms=suspend_ms)
    return encode(RemotingCommand(RequestCode.PULL_MESSAGE, opaque=opaque, ext_fields=header.to_ext()))


async def canary_worst_latency(client: RawClient, topic: str, seconds: float) -> float:
    """The slowest answer to GET_MAX_OFFSET over ``seconds``, asked back to back."""
    worst = 0.0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.monotonic()
        resp = await client.call(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": "0"}, timeout=30)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        worst = max(worst, time.monotonic() - start)
        await asyncio.sleep(0.01)
    return worst


async def test_held_pulls_per_connection_are_bounded_and_teardown_does_not_stall(
    fresh_server: ServerProcess,
) -> None:
    topic = unique("HeldPulls")
    await create_topic(fresh_server.broker, topic, queues=1)
    canary = await RawClient.open(fresh_server.broker)
    before = rss_mb(fresh_server)
    host, port = fresh_server.broker.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    answers: dict[int, int] = {}
    reading = asyncio.create_task(tally_answers(reader, answers))
    total = 100_000
    batch = pull_frame(topic, 1, offset=0, suspend_ms=120_000)
    for _ in range(0, total, 2_000):
        writer.write(batch * 2_000)
        await writer.drain()
    # Every pull past the limit is answered at once; the rest stay held (queue empty, 120 s suspend).
    deadline = time.monotonic() + 60
    while answers.get(ResponseCode.SYSTEM_BUSY, 0) < total - 10_000 and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    grown = rss_mb(fresh_server) - before
    busy = answers.get(ResponseCode.SYSTEM_BUSY, 0)
    print(f"held pulls: RSS +{grown:.0f} MB, {busy} SYSTEM_BUSY")
    assert busy == total - 10_000, f"{busy} SYSTEM_BUSY answers of {total}; answers {answers}"
    assert grown < 100, f"RSS grew {grown:.0f} MB holding pulls for one connection"

    # Closing the socket releases its held pulls without stalling another client.
    writer.close()
    worst = await canary_worst_latency(canary, topic, 2.0)
    reading.cancel()
    canary.close()
    print(f"teardown: worst canary latency {worst * 1000:.0f} ms")
    assert worst < 0.5, f"a canary request waited {worst:.2f} s while a connection was torn down"


async def test_a_client_that_never_reads_costs_bounded_memory(fresh_server: ServerProcess) -> None:
    topic = unique("NeverReads")
    await create_topic(fresh_server.broker, topic, queues=1)
    producer = await RawClient.open(fresh_server.broker)
    body = b"x" * (MIB - 1024)
    for _ in range(32):
        sent = await producer.send(topic, body)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
    producer.close()
    before = rss_mb(fresh_server)
    host, port = fresh_server.broker.rsplit(":", 1)
    _reader, writer = await asyncio.open_connection(host, int(port), limit=1024)
    # Pulls of up to 32 x 1 MiB each, pipelined in one write; the client then reads nothing.
    written = 2_000
    writer.write(pull_frame(topic, 1, offset=0, suspend_ms=0) * written)
    peak = before
    for _ in range(30):
        await asyncio.sleep(0.1)
        peak = max(peak, rss_mb(fresh_server))
    grown = peak - before
    writer.transport.abort()
    print(f"never-reading client: {written} pulls written, RSS +{grown:.0f} MB")
    assert grown < 48, f"RSS peaked {grown:.0f} MB higher for answers a client never read"
