"""NSQ benchmark: tidemq's nsqd-compatible server driven by tidemq's own asyncio NSQ client.

One ``python -m tidemq nsqd --flush MODE`` child process is started per flush mode (``--flush async``,
the default, ``sync`` or ``both``: async then a fresh sync server) on free 127.0.0.1 ports with a
temporary data directory (a subclass of ``broker_bench.Server``, stopped by its PID).  Every workload uses
a fresh topic; bodies are random, 1 KiB unless ``--body-size`` says otherwise.  Producer and consumer run
in this process, on one event loop.

1. PUB, one ``Producer``:

   * ``PUB sequential``  ``await producer.publish(topic, body)``, one PUB in flight (p50/p99 of the
     round trip are reported);
   * ``PUB pipelined``   ``producer.publish_async`` with at most ``--window`` (256) PUBs unanswered.

2. MPUB, one ``Producer``, ``producer.multi_publish_async`` with 32 and with 100 bodies per MPUB and at
   most ``MPUB_WINDOW`` (8) MPUBs unanswered (plus one sequential batch-100 row for comparison).

   After every PUB/MPUB row the topic's ``message_count`` from ``/stats`` is checked against the
   publishes nsqd acknowledged.

3. Consumer, ``Consumer(topic, "bench", max_in_flight=N)`` with one no-op async handler (auto-FIN), for
   N = 1, 32, 200:

   * ``drain``  a backlog of messages is published first (MPUB x100, pipelined; not timed), then the
     consumer connects and drains it: msgs/s is distinct messages handled over the time from
     ``connect_to_nsqd`` to the last handler call;
   * ``paced``  the consumer connects first, then a producer publishes at ``--rate`` (2,000) msg/s with
     ``publish_async``; each body starts with its sequence number and ``time.monotonic_ns()`` taken just
     before ``publish_async``, and the handler records ``time.monotonic_ns()`` on entry: p50/p99/max is
     publish call -> handler call.  The producer stops at twice the paced duration if it falls behind.

   Every delivered body is checked off by sequence number: duplicates, redeliveries (attempts > 1) and
   messages acknowledged to the producer but never handled (LOST) are reported.  After the consumer
   stops, the channel's ``/stats`` must show depth 0, nothing in flight, nothing requeued or timed out.

Server CPU is utime + stime of the nsqd PID from /proc/<pid>/stat; client CPU is ``resource.getrusage``
of this process (producer and consumer together in paced rows).  Both are CPU seconds over the row's
wall time, with that as a percentage of one core.  Every workload stops at its message budget or its
time cap, whichever comes first.

Usage: ``.venv/bin/python benchmarks/nsq_bench.py [--quick] [--flush async|sync|both] [--body-size N]``
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import logging
import math
import os
import platform
import resource
import struct
import subprocess
import sys
import time
import urllib.request
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from broker_bench import HOST, MIB, Server, cpu_model, free_port
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
    """``python -m tidemq nsqd`` as a child process; CPU, stop and cleanup as ``broker_bench.Server``."""

    def __init__(self, flush: str) -> None:
        super().__init__(flush)
        self.tcp_port = free_port()
        self.http_port = free_port()

    @property
    def tcp(self) -> str:
        return f"{HOST}:{self.tcp_port}"

    def start(self, timeout: float = 30.0) -> None:
        args = [
            sys.executable, "-m", "tidemq", "nsqd",
            "--tcp-address", self.tcp,
            "--http-address", f"{HOST}:{self.http_port}",
            "--data-dir", str(self.data_dir),
            "--flush", self.flush,
        ]  # fmt: skip
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                args, stdout=subprocess.PIPE, stderr=log, env={**os.environ, "PYTHONUNBUFFERED": "1"}
            )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith(b"tidemq ready"):
                return
            if not line and self.proc.poll() is not None:
                break
        self.stop()
        raise RuntimeError(f"nsqd ({self.flush}) did not start: {self.log_tail()}")

    def stats(self, topic: str) -> dict[str, Any]:
        """The topic's entry of ``/stats?format=json`` (empty if nsqd does not know it)."""
        url = f"http://{HOST}:{self.http_port}/stats?format=json&topic={topic}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            doc = json.loads(resp.read())
        for entry in doc.get("topics") or []:
            if entry.get("topic_name") == topic:
                return dict(entry)
        return {}


class Meter:
    """Server CPU (from /proc), this process's CPU (getrusage) and wall time over one measurement."""

    def __init__(self, server: Nsqd) -> None:
        self.server = server
        self.server0 = server.cpu_seconds()
        self.client0 = client_cpu()
        self.wall0 = time.monotonic()

    def into(self, row: Row) -> None:
        row.server_cpu = self.server.cpu_seconds() - self.server0
        row.client_cpu = client_cpu() - self.client0
        row.cpu_wall = time.monotonic() - self.wall0


def client_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


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


class Recorder:
    """The no-op handler: checks off sequence numbers and notes publish -> handler latency."""

    def __init__(self, capacity: int) -> None:
        self.seen = bytearray(capacity)
        self.target = capacity
        self.distinct = 0
        self.duplicates = 0
        self.redelivered = 0
        self.foreign = 0
        self.latencies_ns: list[int] = []
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
        if seq >= len(self.seen):
            self.foreign += 1
            return
        if self.seen[seq]:
            self.duplicates += 1
            return
        self.seen[seq] = 1
        self.distinct += 1
        self.latencies_ns.append(now - sent)
        if self.distinct >= self.target:
            self.all_in.set()


def percentile_ms(sorted_ns: list[int], p: float) -> float | None:
    if not sorted_ns:
        return None
    return sorted_ns[max(0, math.ceil(p * len(sorted_ns)) - 1)] / 1e6


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
        meter.into(row)
    except Exception as exc:
        row.error = describe(exc)
        return row
    finally:
        await producer.stop()
    row.messages, row.seconds = done.acked, done.seconds
    if done.latencies_ns:
        latencies = sorted(done.latencies_ns)
        row.p50_ms, row.p99_ms = percentile_ms(latencies, 0.50), percentile_ms(latencies, 0.99)
        row.max_ms = latencies[-1] / 1e6
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
    recorder = Recorder(sent.acked + sent.failed)
    recorder.target = sent.acked
    consumer = Consumer(topic, CHANNEL, max_in_flight=mif)
    consumer.add_handler(recorder.handle)
    meter = Meter(server)
    start_ns = time.monotonic_ns()
    try:
        await consumer.connect_to_nsqd(server.tcp)
        try:
            await asyncio.wait_for(recorder.all_in.wait(), s.limits.drain_seconds)
        except TimeoutError:
            row.notes.append(f"time cap ({s.limits.drain_seconds:g} s): {recorder.distinct:,} drained")
        meter.into(row)
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

        def submit(seq: int) -> tuple[asyncio.Future[None], int]:
            return producer.publish_async(topic, stamped(seq, pad)), 1

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
                pending.append(submit(seq)[0])
            while pending:
                await settle(done, pending.popleft(), 1)
            done.seconds = time.monotonic() - start
            return done

        sent = await asyncio.wait_for(paced(), s.limits.paced_seconds + SLACK)
        recorder.target = sent.acked
        if recorder.distinct < sent.acked:
            try:
                await asyncio.wait_for(recorder.all_in.wait(), s.limits.drain_seconds)
            except TimeoutError:
                row.notes.append(f"not drained {s.limits.drain_seconds:g} s after the last publish")
        meter.into(row)
    finally:
        await stop_consumer(consumer, row)
        await producer.stop()
    row.messages = recorder.distinct
    row.seconds = max(1e-9, (recorder.last_ns - start_ns) / 1e9)
    latencies = sorted(recorder.latencies_ns)
    row.p50_ms, row.p99_ms = percentile_ms(latencies, 0.50), percentile_ms(latencies, 0.99)
    row.max_ms = latencies[-1] / 1e6 if latencies else None
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


# --- driver ------------------------------------------------------------------------------------------


Section = tuple[str, list[Row]]


async def guarded(name: str, server: Nsqd, make: Callable[[], Awaitable[Row]], budget: float) -> Row:
    if not server.alive():
        raise RuntimeError(f"nsqd exited with {server.proc and server.proc.poll()}")
    try:
        row = await asyncio.wait_for(make(), budget)
    except TimeoutError:
        row = Row(name, error=f"HUNG: not finished in {budget:.0f} s")
    except Exception as exc:
        row = Row(name, error=describe(exc))
    report(row)
    return row


async def bench(server: Nsqd, s: Settings) -> list[Section]:
    lim = s.limits
    body = os.urandom(s.body)
    budget = lim.produce_seconds + 2 * SLACK

    async def pipe(p: Producer, topic: str, b: bytes) -> Pumped:
        return await pipelined(
            lambda _: (p.publish_async(topic, b), 1), lim.pub_pipe, lim.produce_seconds, s.window
        )

    def mpub(batch: int, window: int) -> ProduceFn:
        async def run(p: Producer, topic: str, b: bytes) -> Pumped:
            bodies = [b] * batch

            def submit(seq: int) -> tuple[asyncio.Future[None], int]:
                n = min(batch, lim.mpub - seq)
                return p.multi_publish_async(topic, bodies if n == batch else bodies[:n]), n

            return await pipelined(submit, lim.mpub, lim.produce_seconds, window)

        return run

    async def seq(p: Producer, topic: str, b: bytes) -> Pumped:
        return await pub_sequential(p, topic, b, lim.pub_seq, lim.produce_seconds)

    pub_plan: list[tuple[str, ProduceFn]] = [
        ("PUB sequential (1 in flight)", seq),
        (f"PUB pipelined ({s.window} in flight)", pipe),
    ]
    mpub_plan: list[tuple[str, ProduceFn]] = [
        (f"MPUB x{n} pipelined ({MPUB_WINDOW} MPUBs in flight)", mpub(n, MPUB_WINDOW)) for n in MPUB_BATCHES
    ]
    mpub_plan.append((f"MPUB x{MPUB_BATCHES[-1]} sequential (1 MPUB in flight)", mpub(MPUB_BATCHES[-1], 1)))

    sections: list[Section] = []
    for title, plan, prefix in (("PUB", pub_plan, "pub"), ("MPUB", mpub_plan, "mpub")):
        rows = []
        for i, (name, fn) in enumerate(plan):

            def make(name: str = name, fn: ProduceFn = fn, topic: str = f"{prefix}{i}") -> Awaitable[Row]:
                return producer_row(server, name, topic, body, fn, lim.produce_seconds)

            rows.append(await guarded(name, server, make, budget))
        sections.append((title, rows))

    drain_budget = 3 * lim.drain_seconds + 2 * SLACK
    drains = [
        await guarded(f"drain, max_in_flight {m}", server, lambda m=m: drain_row(server, s, m), drain_budget)
        for m in MAX_IN_FLIGHT
    ]
    sections.append(("Consumer drain", drains))
    paced_budget = lim.paced_seconds + lim.drain_seconds + 2 * SLACK
    paced = [
        await guarded(f"paced, max_in_flight {m}", server, lambda m=m: paced_row(server, s, m), paced_budget)
        for m in MAX_IN_FLIGHT
    ]
    sections.append(("End to end, paced", paced))
    return sections


def run_mode(s: Settings) -> list[Section]:
    server = Nsqd(s.flush)
    try:
        server.start()
        print(f"nsqd ({s.flush} flush) pid {server.pid}, data dir {server.data_dir}", file=sys.stderr)
        return asyncio.run(bench(server, s))
    except Exception:
        print(f"nsqd log tail ({s.flush}):\n{server.log_tail()}", file=sys.stderr)
        raise
    finally:
        code = server.stop()
        if code not in (0, None):
            print(f"nsqd ({s.flush}) exited with {code}; log tail:\n{server.log_tail()}", file=sys.stderr)
        server.cleanup()


# --- report ------------------------------------------------------------------------------------------


def rate(row: Row) -> float:
    return row.messages / row.seconds if row.seconds > 0 else 0.0


def report(row: Row) -> None:
    if row.error:
        print(f"  {row.workload}: FAILED: {row.error}", file=sys.stderr)
        return
    latency = f", p50 {row.p50_ms:.2f} ms, p99 {row.p99_ms:.2f} ms" if row.p99_ms is not None else ""
    notes = f" [{'; '.join(row.notes)}]" if row.notes else ""
    summary = f"{row.messages:,} msgs in {row.seconds:.2f} s, {rate(row):,.0f} msg/s"
    print(f"  {row.workload}: {summary}{latency}{notes}", file=sys.stderr)


def cpu_cell(cpu: float, wall: float) -> str:
    return f"{cpu:.2f} ({100 * cpu / wall:.0f}%)" if wall > 0 else f"{cpu:.2f}"


def ms(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def table(rows: list[Row], body: int) -> str:
    lines = [
        "| workload | messages | seconds | msgs/s | MiB/s | p50 ms | p99 ms | max ms "
        "| server CPU s | client CPU s | notes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        if r.error:
            lines.append(f"| {r.workload} | FAILED | | | | | | | | | {r.error} |")
            continue
        cells = [
            r.workload,
            f"{r.messages:,}",
            f"{r.seconds:.2f}",
            f"{rate(r):,.0f}",
            f"{r.messages * body / MIB / r.seconds:.2f}" if r.seconds > 0 else "",
            ms(r.p50_ms),
            ms(r.p99_ms),
            ms(r.max_ms),
            cpu_cell(r.server_cpu, r.cpu_wall),
            cpu_cell(r.client_cpu, r.cpu_wall),
            "; ".join(r.notes),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


class WarningCounter(logging.Handler):
    """Counts the warnings tidemq logs (they also reach stderr through the root handler)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: collections.Counter[str] = collections.Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[record.name] += 1


def size(n: int) -> str:
    return f"{n // 1024} KiB" if n % 1024 == 0 else f"{n} B"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small budgets and short time caps (smoke run)")
    parser.add_argument("--flush", choices=("async", "sync", "both"), default="async", help="nsqd --flush")
    parser.add_argument("--body-size", type=int, default=1024, help="message body bytes (default 1024)")
    parser.add_argument("--rate", type=int, default=2_000, help="paced publish rate, msg/s (default 2000)")
    parser.add_argument("--window", type=int, default=WINDOW, help="PUBs unanswered at once (default 256)")
    args = parser.parse_args()
    if args.body_size < HEADER.size:
        parser.error(f"--body-size must be at least {HEADER.size} (sequence number and timestamp)")
    if args.rate < 1 or args.window < 1:
        parser.error("--rate and --window must be positive")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    warnings = WarningCounter()
    logging.getLogger().addHandler(warnings)
    limits = QUICK if args.quick else FULL

    started = time.monotonic()
    modes = ("async", "sync") if args.flush == "both" else (args.flush,)
    results = []
    for flush in modes:
        results.append((flush, run_mode(Settings(args.body_size, flush, args.rate, args.window, limits))))

    where = (
        f"{os.cpu_count()} cores ({cpu_model()}), Python {platform.python_version()}, "
        f"body {size(args.body_size)}"
    )
    print(
        f"tidemq nsqd benchmark{' (--quick)' if args.quick else ''}: client (tidemq.nsq.client, one process, "
        f"one event loop) and server share the machine over 127.0.0.1.  Budgets: PUB sequential "
        f"{limits.pub_seq:,}, pipelined {limits.pub_pipe:,}, MPUB {limits.mpub:,} messages, "
        f"{limits.produce_seconds:g} s cap each; drain backlog {limits.backlog:,}, cap "
        f"{limits.drain_seconds:g} s; paced {args.rate:,} msg/s for {limits.paced_seconds:g} s (producer and "
        f"consumer on the same loop, at most {args.window} publishes unanswered).  "
        f"CPU columns: CPU seconds over the row (% of one core)."
    )
    n = 0
    for flush, sections in results:
        for title, rows in sections:
            n += 1
            print()
            print(f"### {n}. {title} — {where}, flush {flush}")
            print()
            print(table(rows, args.body_size))
    print()
    if warnings.counts:
        print("Client warnings logged: " + ", ".join(f"{k} x{c}" for k, c in warnings.counts.items()))
    print(f"Total wall time {time.monotonic() - started:.1f} s")
    bad = ("LOST", "MISMATCH", "channel after", "failed")
    failed = any(
        r.error or any(any(b in note for b in bad) for note in r.notes)
        for _, sections in results
        for _, rows in sections
        for r in rows
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
