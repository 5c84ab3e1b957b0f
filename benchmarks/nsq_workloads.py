"""The NSQ benchmark's workloads: the nsqd child process, producing and consuming rows (see nsq_bench.py)."""

from __future__ import annotations

import asyncio
import json
import os
import struct
import time
import urllib.request
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bench_common import HOST, Checklist, Meter, Server, describe, free_port, latency_ms
from tidemq.nsq.client import Consumer, Message, Producer

CHANNEL = "bench"
WINDOW = 256  # PUBs unanswered at once (pipelined rows)
MPUB_WINDOW = 8  # MPUBs unanswered at once
MPUB_BATCHES = (32, 100)
PRELOAD_BATCH = 100
MAX_IN_FLIGHT = (1, 32, 200)
HEADER = struct.Struct("<QQ")  # sequence number, time.monotonic_ns() just before publishing
SLACK = 30.0  # beyond a workload's own time cap before it counts as hung
STOP_TIMEOUT = 20.0


@dataclass(frozen=True)
class Limits:
    """Message budgets and wall-time caps (seconds) per workload."""

    pub_seq: int
    pub_pipe: int
    mpub: int
    produce_seconds: float
    backlog: int
    drain_seconds: float
    paced_seconds: float


FULL = Limits(
    pub_seq=30_000, pub_pipe=200_000, mpub=300_000, produce_seconds=10.0,
    backlog=60_000, drain_seconds=20.0, paced_seconds=8.0,
)  # fmt: skip
QUICK = Limits(
    pub_seq=5_000, pub_pipe=30_000, mpub=60_000, produce_seconds=3.0,
    backlog=10_000, drain_seconds=6.0, paced_seconds=3.0,
)  # fmt: skip


@dataclass
class Row:
    workload: str
    messages: int = 0
    seconds: float = 0.0
    server_cpu: float = 0.0
    client_cpu: float = 0.0
    cpu_wall: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    notes: list[str] = field(default_factory=list)
    error: str | None = None


@dataclass
class Settings:
    body: int
    flush: str
    rate: int
    window: int
    limits: Limits


# --- server ------------------------------------------------------------------------------------------


class Nsqd(Server):
    """``python -m tidemq nsqd`` as a child process; the rest as ``bench_common.Server``."""

    name = "nsqd"

    def __init__(self, flush: str, event_loop: str = "asyncio") -> None:
        super().__init__(flush)
        self.event_loop = event_loop
        self.tcp_port = free_port()
        self.http_port = free_port()

    @property
    def tcp(self) -> str:
        return f"{HOST}:{self.tcp_port}"

    def command(self) -> list[str]:
        args = ["nsqd", "--tcp-address", self.tcp, "--http-address", f"{HOST}:{self.http_port}"]
        return args if self.event_loop == "asyncio" else [*args, "--event-loop", self.event_loop]

    def stats(self, topic: str) -> dict[str, Any]:
        """The topic's entry of ``/stats?format=json`` (empty if nsqd does not know it)."""
        url = f"http://{HOST}:{self.http_port}/stats?format=json&topic={topic}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            doc = json.loads(resp.read())
        for entry in doc.get("topics") or []:
            if entry.get("topic_name") == topic:
                return dict(entry)
        return {}


# --- producing ---------------------------------------------------------------------------------------


@dataclass
class Pumped:
    """What a producing loop got done."""

    acked: int = 0
    failed: int = 0
    first_error: str | None = None
    capped: bool = False
    seconds: float = 0.0
    latencies_ns: list[int] = field(default_factory=list)


async def settle(done: Pumped, future: Awaitable[None], n: int) -> None:
    try:
        await future
        done.acked += n
    except Exception as exc:
        done.failed += n
        done.first_error = done.first_error or describe(exc)


async def pub_sequential(producer: Producer, topic: str, body: bytes, count: int, seconds: float) -> Pumped:
    done = Pumped()
    start = time.monotonic()
    for _ in range(count):
        if time.monotonic() - start >= seconds:
            done.capped = True
            break
        t0 = time.perf_counter_ns()
        await settle(done, producer.publish(topic, body), 1)
        done.latencies_ns.append(time.perf_counter_ns() - t0)
    done.seconds = time.monotonic() - start
    return done


async def pipelined(
    submit: Callable[[int], tuple[asyncio.Future[None], int]], count: int, seconds: float, window: int
) -> Pumped:
    """Call ``submit(seq)`` (a future and how many messages it carries) until ``count`` messages are
    submitted, with at most ``window`` futures unanswered; answers come in order, so wait on the oldest."""
    done = Pumped()
    pending: deque[tuple[asyncio.Future[None], int]] = deque()
    start = time.monotonic()
    seq = 0
    while seq < count:
        if time.monotonic() - start >= seconds:
            done.capped = True
            break
        if len(pending) >= window:
            await settle(done, *pending.popleft())
        future, n = submit(seq)
        pending.append((future, n))
        seq += n
    while pending:
        await settle(done, *pending.popleft())
    done.seconds = time.monotonic() - start
    return done


def stamped(seq: int, pad: bytes) -> bytes:
    return HEADER.pack(seq, time.monotonic_ns()) + pad


# --- consuming ---------------------------------------------------------------------------------------


class Recorder(Checklist):
    """The no-op handler: checks off sequence numbers and notes publish -> handler latency."""

    def __init__(self, capacity: int, target: int | None = None) -> None:
        super().__init__(capacity)
        self.target = capacity if target is None else target
        self.redelivered = 0
        self.last_ns = 0
        self.all_in = asyncio.Event()

    async def handle(self, message: Message) -> None:
        now = time.monotonic_ns()
        self.last_ns = now
        if message.attempts > 1:
            self.redelivered += 1
        try:
            seq, sent = HEADER.unpack_from(message.body)
        except struct.error:
            self.foreign += 1
            return
        if self.check(seq, now - sent) and self.distinct >= self.target:
            self.all_in.set()

    def expect(self, count: int) -> None:
        """Lower the target to what the producer got acknowledged (it may be there already)."""
        self.target = count
        if self.distinct >= count:
            self.all_in.set()

    async def all_arrived(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the target; whether it was reached."""
        try:
            await asyncio.wait_for(self.all_in.wait(), timeout)
        except TimeoutError:
            return False
        return True


async def channel_check(server: Nsqd, topic: str, row: Row) -> None:
    """After the consumer stopped: the channel should be empty with nothing in flight or requeued."""
    deadline = time.monotonic() + 3.0
    while True:
        entry = await asyncio.to_thread(server.stats, topic)
        channels = {c.get("channel_name"): c for c in entry.get("channels") or []}
        ch = channels.get(CHANNEL)
        if ch is None:
            row.notes.append(f"CHANNEL {CHANNEL} missing from /stats")
            return
        keys = ("depth", "in_flight_count", "deferred_count", "requeue_count", "timeout_count")
        bad = {k: ch.get(k) for k in keys if ch.get(k)}
        if not bad or time.monotonic() >= deadline:
            break
        await asyncio.sleep(0.1)
    if bad:
        row.notes.append("channel after stop: " + ", ".join(f"{k} {v}" for k, v in bad.items()))


async def stop_consumer(consumer: Consumer, row: Row) -> None:
    started = time.monotonic()
    try:
        await asyncio.wait_for(consumer.stop(), STOP_TIMEOUT)
    except Exception as exc:
        row.notes.append(f"consumer stop failed: {describe(exc)}")
    took = time.monotonic() - started
    if took > 2:
        row.notes.append(f"consumer stop took {took:.1f} s")


def consumer_notes(row: Row, recorder: Recorder, expected: int, failed_pub: int) -> None:
    lost = expected - recorder.distinct
    if lost > 0:
        first = [s for s in range(expected + failed_pub) if not recorder.seen[s]][:5]
        row.notes.append(f"LOST {lost:,} acked messages (first seqs {first})")
    if failed_pub:
        row.notes.append(f"{failed_pub:,} publishes failed")
    if recorder.duplicates:
        row.notes.append(f"{recorder.duplicates:,} duplicate deliveries")
    if recorder.redelivered:
        row.notes.append(f"{recorder.redelivered:,} deliveries with attempts > 1")
    if recorder.foreign:
        row.notes.append(f"{recorder.foreign:,} unexpected bodies")


# --- workloads -----------------------------------------------------------------------------------------


ProduceFn = Callable[[Producer, str, bytes], Awaitable[Pumped]]


async def producer_row(server: Nsqd, name: str, topic: str, body: bytes, fn: ProduceFn, cap: float) -> Row:
    row = Row(name)
    producer = Producer(server.tcp)
    try:
        await producer.publish(topic, body)  # connection and topic, outside the timing
        meter = Meter(server)
        try:
            done = await asyncio.wait_for(fn(producer, topic, body), cap + SLACK)
        except TimeoutError:
            row.error = f"HUNG: not finished {cap + SLACK:.0f} s after starting (cap {cap:g} s)"
            return row
        row.server_cpu, row.client_cpu, row.cpu_wall = meter.read()
    except Exception as exc:
        row.error = describe(exc)
        return row
    finally:
        await producer.stop()
    row.messages, row.seconds = done.acked, done.seconds
    row.p50_ms, row.p99_ms, row.max_ms = latency_ms(done.latencies_ns)
    if done.capped:
        row.notes.append("time cap")
    if done.failed:
        row.notes.append(f"{done.failed:,} publishes failed ({done.first_error})")
    count = (await asyncio.to_thread(server.stats, topic)).get("message_count")
    if count != done.acked + 1:
        row.notes.append(f"SERVER COUNT MISMATCH: /stats message_count {count}, acked {done.acked + 1:,}")
    return row


async def preload(server: Nsqd, topic: str, pad: bytes, count: int, seconds: float) -> Pumped:
    async with Producer(server.tcp) as producer:

        def submit(seq: int) -> tuple[asyncio.Future[None], int]:
            n = min(PRELOAD_BATCH, count - seq)
            bodies = [stamped(s, pad) for s in range(seq, seq + n)]
            return producer.multi_publish_async(topic, bodies), n

        return await asyncio.wait_for(pipelined(submit, count, seconds, MPUB_WINDOW), seconds + SLACK)


async def drain_row(server: Nsqd, s: Settings, mif: int) -> Row:
    row = Row(f"drain, max_in_flight {mif}")
    topic = f"drain_mif{mif}"
    pad = os.urandom(s.body - HEADER.size)
    sent = await preload(server, topic, pad, s.limits.backlog, s.limits.drain_seconds * 2)
    recorder = Recorder(sent.acked + sent.failed, sent.acked)
    consumer = Consumer(topic, CHANNEL, max_in_flight=mif)
    consumer.add_handler(recorder.handle)
    meter = Meter(server)
    start_ns = time.monotonic_ns()
    try:
        await consumer.connect_to_nsqd(server.tcp)
        if not await recorder.all_arrived(s.limits.drain_seconds):
            row.notes.append(f"time cap ({s.limits.drain_seconds:g} s): {recorder.distinct:,} drained")
        row.server_cpu, row.client_cpu, row.cpu_wall = meter.read()
    finally:
        await stop_consumer(consumer, row)
    row.messages = recorder.distinct
    row.seconds = max(1e-9, (recorder.last_ns - start_ns) / 1e9)
    row.notes.insert(0, f"backlog {sent.acked:,} (MPUB x{PRELOAD_BATCH} in {sent.seconds:.1f} s)")
    capped = not recorder.all_in.is_set()  # then what is missing was not yet lost, just not drained
    consumer_notes(row, recorder, recorder.distinct if capped else sent.acked, sent.failed)
    if recorder.distinct >= sent.acked:
        await channel_check(server, topic, row)
    return row


async def paced_row(server: Nsqd, s: Settings, mif: int) -> Row:
    row = Row(f"paced {s.rate:,}/s, max_in_flight {mif}")
    topic = f"paced_mif{mif}"
    pad = os.urandom(s.body - HEADER.size)
    count = int(s.rate * s.limits.paced_seconds)
    recorder = Recorder(count)
    consumer = Consumer(topic, CHANNEL, max_in_flight=mif)
    consumer.add_handler(recorder.handle)
    producer = Producer(server.tcp)
    try:
        await producer.ping()  # connected before the clock starts
        await consumer.connect_to_nsqd(server.tcp)  # SUB creates topic and channel
        await asyncio.sleep(0.2)  # RDY reaches nsqd
        meter = Meter(server)
        start = time.monotonic()
        start_ns = time.monotonic_ns()
        full = 0  # times the window was full when the next publish was due

        async def paced() -> Pumped:
            nonlocal full
            done = Pumped()
            pending: deque[asyncio.Future[None]] = deque()
            for seq in range(count):
                if time.monotonic() - start >= 2 * s.limits.paced_seconds:
                    done.capped = True
                    break
                delay = start + seq / s.rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                if len(pending) >= s.window:
                    full += 1
                    await settle(done, pending.popleft(), 1)
                pending.append(producer.publish_async(topic, stamped(seq, pad)))
            while pending:
                await settle(done, pending.popleft(), 1)
            done.seconds = time.monotonic() - start
            return done

        sent = await asyncio.wait_for(paced(), s.limits.paced_seconds + SLACK)
        recorder.expect(sent.acked)
        if not await recorder.all_arrived(s.limits.drain_seconds):
            row.notes.append(f"not drained {s.limits.drain_seconds:g} s after the last publish")
        row.server_cpu, row.client_cpu, row.cpu_wall = meter.read()
    finally:
        await stop_consumer(consumer, row)
        await producer.stop()
    row.messages = recorder.distinct
    row.seconds = max(1e-9, (recorder.last_ns - start_ns) / 1e9)
    row.p50_ms, row.p99_ms, row.max_ms = latency_ms(recorder.latencies_ns)
    published = sent.acked / sent.seconds if sent.seconds > 0 else 0.0
    row.notes.insert(0, f"published {sent.acked:,} at {published:,.0f} msg/s")
    if published < 0.95 * s.rate:
        row.notes.insert(1, f"PRODUCER BELOW THE {s.rate:,}/s TARGET ({s.window} unanswered {full:,} times)")
    if sent.capped:
        row.notes.append(f"producer time cap ({2 * s.limits.paced_seconds:g} s)")
    consumer_notes(row, recorder, sent.acked, sent.failed)
    if recorder.distinct >= sent.acked:
        await channel_check(server, topic, row)
    return row
