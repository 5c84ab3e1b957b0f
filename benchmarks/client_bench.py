"""Client benchmark: the Python Producer and PushConsumer against a real ``tidemq server`` (async flush).

One server is started on free 127.0.0.1 ports with a temporary data directory (``Server`` from
``bench_common.py``); every workload uses a fresh topic of 4 queues and 1 KiB random bodies.

Producer throughput (the producer runs in this process, nothing consumes):

* ``sync send``   ``await producer.send(msg)``, one send in flight;
* ``async send``  ``producer.send_async(msg)`` with at most 256 sends in flight;
* ``batch32``     ``await producer.send_batch(msgs)`` with 32 messages per batch, one batch in flight.

Push consumer end to end (the consumer runs in this process with a no-op coroutine listener; the
producer runs in a child process, ``async send`` with at most 256 in flight, so the two do not share
one event loop and one GIL):

* ``e2e concurrent``  full-speed producer, the concurrent consume service;
* ``e2e orderly``     full-speed producer, ``register_listener(..., orderly=True)``;
* ``e2e paced``       the producer paced at a fixed rate, the concurrent consume service.

Each message carries its sequence number and ``time.time_ns()`` taken just before ``send_async`` in user
properties; the listener records ``time.time_ns()`` on entry, so latency is send call -> listener call
(both processes read the same wall clock).  Consumed msg/s is distinct messages consumed divided by the
time from the first send to the last listener call.  At full speed the producer outruns the consumer,
so those latencies are mostly time spent waiting in the backlog; the paced run shows the latency of an
unsaturated consumer.  The consumer starts from the first offset and every queue is assigned (and, for
orderly, locked) before the producer starts.  Messages acknowledged to the producer but never seen by
the listener are reported as lost.

Every workload stops at its message budget or its time cap; consumers get a bounded drain time.

Usage: ``.venv/bin/python benchmarks/client_bench.py [--quick]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench_common import (
    MIB,
    Checklist,
    Meter,
    Server,
    WarningCounter,
    arg_parser,
    describe,
    latency_ms,
    machine,
    md_row,
    rate,
    report,
    wait_until,
    with_server,
)
from broker_bench import QUEUES, Client
from tidemq.client.consumer import ConsumeContext, ConsumeFromWhere, ConsumeStatus, PushConsumer
from tidemq.client.message import Message, SendResult
from tidemq.client.producer import Producer
from tidemq.record import MessageExt

BODY = 1024
INFLIGHT = 256
BATCH = 32
SEQ_PROP = "bench_seq"
SENT_PROP = "bench_sent_ns"
READY_TIMEOUT = 15.0  # consumer: every queue assigned (and locked)
WORKER_SLACK = 30.0  # producer child: start-up plus in-flight sends beyond its own time cap
SHUTDOWN_TIMEOUT = 20.0
FLUSH = "async"


@dataclass(frozen=True)
class Limits:
    """Message budgets and wall-time caps (seconds) per workload."""

    sync: int
    async_: int
    batch: int
    produce_seconds: float
    e2e: int
    e2e_seconds: float
    drain_seconds: float
    paced_rate: int
    paced_seconds: float
    backlog: int


FULL = Limits(
    sync=30_000, async_=100_000, batch=200_000, produce_seconds=15.0,
    e2e=80_000, e2e_seconds=15.0, drain_seconds=30.0,
    paced_rate=2_000, paced_seconds=10.0, backlog=100_000,
)  # fmt: skip
QUICK = Limits(
    sync=3_000, async_=15_000, batch=40_000, produce_seconds=3.0,
    e2e=15_000, e2e_seconds=4.0, drain_seconds=8.0,
    paced_rate=2_000, paced_seconds=3.0, backlog=20_000,
)  # fmt: skip


@dataclass
class Row:
    workload: str
    messages: int = 0
    seconds: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    server_cpu: float = 0.0
    producer_cpu: float | None = None
    consumer_cpu: float | None = None
    #: The wall time the CPU figures were taken over, when it is not ``seconds``.
    cpu_wall: float | None = None
    notes: list[str] = field(default_factory=list)
    error: str | None = None


# --- producing (used in this process and in the producer child) --------------------------------------


@dataclass
class Pumped:
    """What a producing loop got done."""

    issued: int = 0
    acked: int = 0
    failed: list[int] = field(default_factory=list)
    first_error: str | None = None
    capped: bool = False
    first_sent_ns: int = 0
    seconds: float = 0.0
    cpu: float = 0.0


async def pump(
    producer: Producer, topic: str, body: bytes, count: int, seconds: float, *, rate: float = 0.0,
    stamp: bool = False,
) -> Pumped:  # fmt: skip
    """``send_async`` up to ``count`` messages with at most INFLIGHT in flight, at ``rate`` msg/s if set."""
    done = Pumped()
    slots = asyncio.Semaphore(INFLIGHT)
    tasks: set[asyncio.Task[SendResult]] = set()
    cpu0, start = time.process_time(), time.monotonic()
    deadline = start + seconds
    done.first_sent_ns = time.time_ns()

    def on_done(seq: int) -> Callable[[SendResult | None, BaseException | None], None]:
        def callback(result: SendResult | None, exc: BaseException | None) -> None:
            slots.release()
            if exc is None:
                done.acked += 1
            else:
                done.failed.append(seq)
                done.first_error = done.first_error or describe(exc)

        return callback

    for seq in range(count):
        if rate:
            delay = start + seq / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        if time.monotonic() >= deadline:
            done.capped = True
            break
        await slots.acquire()
        props = {SEQ_PROP: str(seq), SENT_PROP: str(time.time_ns())} if stamp else {}
        task = producer.send_async(Message(topic, body, properties=props), on_done(seq))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        done.issued += 1
    if tasks:  # each send is bounded by the producer's send timeout
        await asyncio.wait(list(tasks), timeout=producer.send_timeout * (1 + producer.retry_times) + 5)
    done.seconds = time.monotonic() - start
    done.cpu = time.process_time() - cpu0
    return done


async def sequential(
    count: int, seconds: float, batch: int, send: Callable[[int], Awaitable[object]]
) -> Pumped:
    """One request in flight: ``await send(n)`` (``n`` up to ``batch`` messages) until ``count`` messages
    are acknowledged or ``seconds`` passed."""
    done = Pumped()
    cpu0, start = time.process_time(), time.monotonic()
    while done.acked < count:
        if time.monotonic() >= start + seconds:
            done.capped = True
            break
        n = min(batch, count - done.acked)
        done.issued += n
        await send(n)
        done.acked += n
    done.seconds = time.monotonic() - start
    done.cpu = time.process_time() - cpu0
    return done


async def produce_sync(producer: Producer, topic: str, body: bytes, count: int, seconds: float) -> Pumped:
    return await sequential(count, seconds, 1, lambda _: producer.send(Message(topic, body)))


async def produce_batches(producer: Producer, topic: str, body: bytes, count: int, seconds: float) -> Pumped:
    def send(n: int) -> Awaitable[SendResult]:
        return producer.send_batch([Message(topic, body) for _ in range(n)])

    return await sequential(count, seconds, BATCH, send)


def worker_main(spec_json: str) -> int:
    """The producer child of the end-to-end runs: pump, then print one JSON line with what happened."""
    spec = json.loads(spec_json)

    async def run() -> Pumped:
        async with Producer("BENCH_E2E_PG", spec["namesrv"]) as producer:
            for mq in await producer.queues_for(spec["topic"]):  # route and connection, outside the timing
                await producer.instance.broker_connection(mq.broker_name)
            return await pump(
                producer, spec["topic"], os.urandom(spec["body"]), spec["count"], spec["seconds"],
                rate=spec["rate"], stamp=True,
            )  # fmt: skip

    try:
        result = asyncio.run(run())
    except Exception as exc:
        print(json.dumps({"error": describe(exc)}), flush=True)
        return 1
    print(json.dumps(asdict(result)), flush=True)
    return 0


# --- consuming -----------------------------------------------------------------------------------------


class Recorder(Checklist):
    """The no-op listener: notes which sequence numbers arrived and how long after their send call."""

    def __init__(self, capacity: int, ok: ConsumeStatus) -> None:
        super().__init__(capacity)
        self.ok = ok
        self.first_ns = 0
        self.last_ns = 0

    async def listener(self, msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        now = time.time_ns()
        for msg in msgs:
            try:
                seq, sent = int(msg.properties[SEQ_PROP]), int(msg.properties[SENT_PROP])
            except (KeyError, ValueError):
                self.foreign += 1
                continue
            self.check(seq, now - sent)
        self.first_ns = self.first_ns or now
        self.last_ns = now
        return self.ok


async def run_worker(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()  # SIGKILL to this child's own PID
        await proc.wait()
        raise RuntimeError(f"producer child (pid {proc.pid}) still running after {timeout:.0f} s") from None
    lines = out.decode(errors="replace").strip().splitlines()
    if not lines:
        raise RuntimeError(f"producer child exited with {proc.returncode} and printed nothing")
    answer: dict[str, Any] = json.loads(lines[-1])
    if "error" in answer:
        raise RuntimeError(f"producer child failed: {answer['error']}")
    return answer


async def preload(namesrv: str, topic: str, count: int, seconds: float) -> dict[str, Any]:
    """The backlog for a drain run: ``count`` stamped messages in batches of BATCH, nobody consuming."""
    done = Pumped()
    body = os.urandom(BODY)
    async with Producer(f"BENCH_PG_{topic}", namesrv) as producer:
        cpu0, start = time.process_time(), time.monotonic()
        done.first_sent_ns = time.time_ns()
        while done.issued < count:
            if time.monotonic() >= start + seconds:
                done.capped = True
                break
            seqs = range(done.issued, min(count, done.issued + BATCH))
            now = str(time.time_ns())
            batch = [Message(topic, body, properties={SEQ_PROP: str(q), SENT_PROP: now}) for q in seqs]
            done.issued += len(batch)
            try:
                await producer.send_batch(batch)
                done.acked += len(batch)
            except Exception as exc:
                done.failed.extend(seqs)
                done.first_error = done.first_error or describe(exc)
                break
        done.seconds = time.monotonic() - start
        done.cpu = time.process_time() - cpu0
    return asdict(done)


async def end_to_end(
    server: Server, name: str, topic: str, count: int, seconds: float, drain: float, *, orderly: bool,
    rate: float = 0.0, backlog: bool = False,
) -> Row:  # fmt: skip
    """Consume ``count`` messages: sent by a producer child while the consumer runs, or (``backlog``)
    sent before the consumer starts, in which case the row is the consumer's drain rate alone."""
    row = Row(name)
    namesrv = server.namesrv
    recorder = Recorder(count, ConsumeStatus.SUCCESS if orderly else ConsumeStatus.CONSUME_SUCCESS)
    if backlog:
        sent = await preload(namesrv, topic, count, seconds)
    consumer = PushConsumer(
        f"BENCH_CG_{topic}",
        namesrv,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        await_termination_s=5.0,
    )
    consumer.subscribe(topic, "*")
    consumer.register_listener(recorder.listener, orderly=orderly)
    meter = Meter(server)
    await consumer.start()
    try:

        def ready() -> bool:
            pqs = [pq for mq, pq in consumer.rebalancer.process_queues.items() if mq.topic == topic]
            return len(pqs) == QUEUES and all(pq.locked or not orderly for pq in pqs)

        if not await wait_until(ready, READY_TIMEOUT):
            owned = sorted(mq.queue_id for mq in consumer.rebalancer.process_queues if mq.topic == topic)
            raise RuntimeError(f"consumer owns queues {owned} of {topic} after {READY_TIMEOUT:.0f} s")
        if not backlog:
            spec = {"namesrv": namesrv, "topic": topic, "body": BODY, "count": count, "seconds": seconds}
            meter = Meter(server)
            sent = await run_worker({**spec, "rate": rate}, seconds + WORKER_SLACK)
        failed = set(sent["failed"])
        drained = await wait_until(lambda: recorder.distinct >= sent["issued"] - len(failed), drain)
        row.server_cpu, row.consumer_cpu, row.cpu_wall = meter.read()
    finally:
        shutdown_started = time.monotonic()
        try:
            await asyncio.wait_for(consumer.shutdown(), SHUTDOWN_TIMEOUT)
        except Exception as exc:
            row.notes.append(f"consumer shutdown failed: {describe(exc)}")
        shutdown_s = time.monotonic() - shutdown_started
        if shutdown_s > 5:
            row.notes.append(f"consumer shutdown took {shutdown_s:.1f} s")

    lost = [s for s in range(sent["issued"]) if not recorder.seen[s] and s not in failed]
    row.messages = recorder.distinct
    window_start = recorder.first_ns if backlog else sent["first_sent_ns"]
    row.seconds = max(1e-9, (recorder.last_ns - window_start) / 1e9)
    produced_rate = sent["acked"] / sent["seconds"] if sent["seconds"] > 0 else 0.0
    if backlog:  # latency would be time spent in the backlog; the producer ran before the window
        row.producer_cpu = None
        row.notes.append(f"backlog of {sent['acked']:,} sent first (batch{BATCH}); drain rate only")
    else:
        row.producer_cpu = sent["cpu"]
        row.p50_ms, row.p99_ms, _ = latency_ms(recorder.latencies_ns)
        row.notes.append(f"produced {sent['acked']:,} at {produced_rate:,.0f} msg/s")
    if sent["capped"]:
        row.notes.append("producer hit its time cap")
    if failed:
        row.notes.append(f"{len(failed)} sends failed ({sent['first_error']})")
    if lost:
        row.notes.append(f"LOST {len(lost)} acked messages (first seqs {lost[:5]})")
        if not drained:
            row.notes.append(f"not drained after {drain:g} s")
    if recorder.duplicates:
        row.notes.append(f"{recorder.duplicates} duplicate deliveries")
    if recorder.foreign:
        row.notes.append(f"{recorder.foreign} unexpected messages")
    return row


# --- driver ------------------------------------------------------------------------------------------


ProduceFn = Callable[[Producer, str, bytes, int, float], Awaitable[Pumped]]


async def producer_row(
    server: Server, client: Client, name: str, fn: ProduceFn, topic: str, count: int, seconds: float
) -> Row:
    await client.create_topic(topic)
    row = Row(name)
    body = os.urandom(BODY)
    try:
        async with Producer(f"BENCH_PG_{topic}", server.namesrv) as producer:
            await producer.send(Message(topic, body))  # route lookup and connection, outside the timing
            server_cpu0 = server.cpu_seconds()
            done = await fn(producer, topic, body, count, seconds)
            row.server_cpu = server.cpu_seconds() - server_cpu0
    except Exception as exc:
        row.error = describe(exc)
        return row
    row.messages, row.seconds = done.acked, done.seconds
    row.producer_cpu = done.cpu
    if done.capped:
        row.notes.append("time cap")
    if done.failed:
        row.notes.append(f"{len(done.failed)} sends failed ({done.first_error})")
    return row


async def bench(server: Server, limits: Limits) -> list[Row]:
    rows: list[Row] = []
    client = await Client.open(server.broker_port)
    try:

        async def async_send(p: Producer, topic: str, body: bytes, count: int, seconds: float) -> Pumped:
            return await pump(p, topic, body, count, seconds)

        plan: list[tuple[str, ProduceFn, int]] = [
            ("sync send", produce_sync, limits.sync),
            (f"async send ({INFLIGHT} in flight)", async_send, limits.async_),
            (f"batch{BATCH} send", produce_batches, limits.batch),
        ]
        for i, (name, fn, count) in enumerate(plan):
            rows.append(
                await producer_row(server, client, name, fn, f"CB_P{i}", count, limits.produce_seconds)
            )
            report(rows[-1])

        pace = float(limits.paced_rate)
        paced = int(pace * limits.paced_seconds)
        paced_name = f"{limits.paced_rate:,}/s"
        e2e: list[tuple[str, bool, int, float, float, bool]] = [
            ("e2e concurrent (full speed)", False, limits.e2e, limits.e2e_seconds, 0.0, False),
            ("e2e orderly (full speed)", True, limits.e2e, limits.e2e_seconds, 0.0, False),
            (f"e2e concurrent paced {paced_name}", False, paced, limits.paced_seconds + 1, pace, False),
            ("backlog drain concurrent", False, limits.backlog, limits.e2e_seconds, 0.0, True),
            ("backlog drain orderly", True, limits.backlog, limits.e2e_seconds, 0.0, True),
        ]
        for i, (name, orderly, count, seconds, rate, backlog) in enumerate(e2e):
            if not server.alive():
                raise RuntimeError(f"server exited with {server.proc and server.proc.poll()}")
            topic = f"CB_E{i}"
            await client.create_topic(topic)
            try:
                row = await end_to_end(
                    server, name, topic, count, seconds, limits.drain_seconds,
                    orderly=orderly, rate=rate, backlog=backlog,
                )  # fmt: skip
            except Exception as exc:
                row = Row(name, error=describe(exc))
            rows.append(row)
            report(row)
    finally:
        client.close()
    return rows


# --- report ------------------------------------------------------------------------------------------


def pct(cpu: float | None, seconds: float) -> str:
    return "" if cpu is None or seconds <= 0 else f"{100 * cpu / seconds:.0f}%"


def table(rows: list[Row]) -> str:
    lines = [
        "| workload | messages | msg/s | MiB/s | p50 ms | p99 ms | server CPU | producer CPU "
        "| consumer CPU | notes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        if r.error:
            lines.append(f"| {r.workload} | FAILED | | | | | | | | {r.error} |")
            continue
        cells = [
            r.workload,
            f"{r.messages:,}",
            f"{rate(r):,.0f}",
            f"{r.messages * BODY / MIB / r.seconds:.2f}" if r.seconds > 0 else "",
            "" if r.p50_ms is None else f"{r.p50_ms:.1f}",
            "" if r.p99_ms is None else f"{r.p99_ms:.1f}",
            pct(r.server_cpu, r.cpu_wall or r.seconds),
            pct(r.producer_cpu, r.cpu_wall or r.seconds),
            pct(r.consumer_cpu, r.cpu_wall or r.seconds),
            "; ".join(r.notes),
        ]
        lines.append(md_row(cells))
    return "\n".join(lines)


def main() -> int:
    parser = arg_parser(__doc__)
    parser.add_argument("--worker", metavar="SPEC", help=argparse.SUPPRESS)  # the producer child
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.worker:
        return worker_main(args.worker)
    limits = QUICK if args.quick else FULL
    warnings = WarningCounter()
    logging.getLogger().addHandler(warnings)

    started = time.monotonic()
    rows = with_server(Server(FLUSH), lambda server: asyncio.run(bench(server, limits)))

    print(machine())
    print(
        f"Server: `tidemq server --flush {FLUSH}`, {QUEUES} queues per topic, {BODY} B random bodies; "
        f"client(s) and server share the machine over 127.0.0.1.  Budgets: sync {limits.sync:,}, "
        f"async {limits.async_:,}, batch {limits.batch:,} messages, {limits.produce_seconds:g} s cap each; "
        f"e2e {limits.e2e:,} messages, producer cap {limits.e2e_seconds:g} s, drain cap "
        f"{limits.drain_seconds:g} s; paced {limits.paced_rate:,} msg/s for {limits.paced_seconds:g} s; "
        f"backlog {limits.backlog:,} messages.  "
        f"CPU columns: CPU seconds / wall seconds of the row."
    )
    print()
    print(table(rows))
    print()
    if warnings.counts:
        print(warnings.summary())
    print(f"Total wall time {time.monotonic() - started:.1f} s")
    failed = any(r.error or any("LOST" in n for n in r.notes) for r in rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
