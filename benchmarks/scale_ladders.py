"""The five scale ladders: what one rung does against a running ``tidemq server`` and what it measures.

Every rung measures a send phase of at most ``Budget.seconds`` and ``Budget.messages`` (whichever ends
first) with tidemq's Python ``Producer.send_batch`` (``BATCH`` messages of ``BODY`` bytes per request,
``WINDOW`` requests unanswered) in the driver process, the broker's CPU seconds over that phase (from
``/proc/<pid>/stat``) and its RSS after it (``VmRSS`` and ``RssAnon`` from ``/proc/<pid>/status``).
Clients that would crowd the driver's event loop (idle producers, per-group consumers) run in child
processes (scale_children.py).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import shutil
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import scale_children
from bench_common import MIB, Meter, Server, wait_until
from tidemq.client import api
from tidemq.client.admin import Admin
from tidemq.client.consumer import ConsumeFromWhere
from tidemq.client.consumer.lite_pull import LitePullConsumer
from tidemq.client.message import Message
from tidemq.client.producer import Producer

QUEUES = 4
BODY = 1024
BATCH = 100  # W1's send_batch settings (benchmarks/peers/plan.py)
WINDOW = 4
SETUP_CONCURRENCY = 64
#: Topic creations in flight, and each one's timeout: a creation costs the broker time in proportion to the
#: topics it already has (it persists and re-registers the whole table), so many at once would time out.
CREATE_CONCURRENCY = 4
CREATE_TIMEOUT = 120.0
IDLE_PER_PROCESS = 500
GROUPS_PER_PROCESS = 50
BACKLOG_BODY = 4096
BACKLOG_BATCH = 64
DISK_MARGIN = 2 * 1024 * MIB  # left free on the data dir's filesystem after a backlog rung
TIMER_DELAY = timedelta(days=2)  # far ahead, under the broker's 3-day timer limit
TIMER_WINDOW = 512
CONSUME_TOPICS = 8  # the topics ladder's consume rate reads this many topics at most
CONSUME_BLOCK = 20_000  # ... after this many more messages were sent to them (outside the timing)


@dataclass
class Budget:
    """Bounds of one rung's measured phase, and of its setup (filling a backlog, timers, clients)."""

    seconds: float
    messages: int
    setup_cap: float


@dataclass
class Rung:
    ladder: str
    size: int
    messages: int = 0
    seconds: float = 0.0
    server_cpu: float = 0.0
    rss_kib: int = 0
    anon_kib: int = 0
    consume_rate: float | None = None
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    skipped: str | None = None

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_per_1k(self) -> float | None:
        return self.server_cpu / self.messages * 1000 if self.messages else None


def memory_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, RssAnon) of ``pid`` in KiB."""
    values = {"VmRSS": 0, "RssAnon": 0}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in values:
            values[key] = int(rest.split()[0])
    return values["VmRSS"], values["RssAnon"]


async def bounded(items: list[Any], run: Callable[[Any], Awaitable[object]], limit: int) -> None:
    gate = asyncio.Semaphore(limit)

    async def one(item: Any) -> None:
        async with gate:
            await run(item)

    await asyncio.gather(*(one(i) for i in items))


async def create_topics(namesrv: str, topics: list[str]) -> None:
    """Topics on every master, ``CREATE_CONCURRENCY`` requests at once (Admin.create_topic asks the name
    server for the masters each time: 10,000 topics would pay that 10,000 times)."""
    async with Admin(namesrv) as admin:
        masters: list[str] = []
        deadline = time.monotonic() + 20.0
        while not masters:  # the broker registers with the name server a moment after the server is ready
            masters = list((await admin.cluster_masters()).values())
            if not masters and time.monotonic() > deadline:
                raise RuntimeError("no broker registered with the name server in 20 s")
            if not masters:
                await asyncio.sleep(0.1)
        conns = [await admin.instance.connection(addr) for addr in masters]

        async def create(topic: str) -> None:
            for conn in conns:
                await api.create_topic(conn, topic, QUEUES, timeout=CREATE_TIMEOUT)

        await bounded(topics, create, CREATE_CONCURRENCY)


async def route_all(producer: Producer, topics: list[str]) -> None:
    """Routes and the broker connection before the timing starts."""

    async def route(topic: str) -> None:
        for mq in await producer.queues_for(topic):
            await producer.instance.broker_connection(mq.broker_name)

    await bounded(topics, route, SETUP_CONCURRENCY)


async def send_for(
    producer: Producer,
    topics: list[str],
    seconds: float,
    messages: int,
    body: bytes = b"x" * BODY,
    batch: int = BATCH,
    window: int = WINDOW,
    per_topic: Counter[str] | None = None,
) -> int:
    """Batches round-robin over ``topics`` for ``seconds`` or ``messages``, whichever comes first; returns
    how many messages the broker acknowledged."""
    deadline = time.monotonic() + seconds
    gate = asyncio.Semaphore(window)
    acked = 0
    sent = 0
    failures: list[BaseException] = []
    tasks: set[asyncio.Task[Any]] = set()

    async def one(topic: str) -> None:
        nonlocal acked
        try:
            await producer.send_batch([Message(topic, body) for _ in range(batch)])
            acked += batch
            if per_topic is not None:
                per_topic[topic] += batch
        except Exception as exc:
            failures.append(exc)
        finally:
            gate.release()

    i = 0
    while sent < messages and time.monotonic() < deadline and len(failures) < 10:
        await gate.acquire()
        task = asyncio.create_task(one(topics[i % len(topics)]))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        i += 1
        sent += batch
    if tasks:
        await asyncio.wait(tasks, timeout=30.0)
    if failures and not acked:
        raise RuntimeError(f"every send failed: {failures[0]!r}")
    return acked


async def measured_send(
    server: Server,
    rung: Rung,
    producer: Producer,
    topics: list[str],
    budget: Budget,
    per_topic: Counter[str] | None = None,
) -> None:
    meter = Meter(server)
    rung.messages = await send_for(producer, topics, budget.seconds, budget.messages, per_topic=per_topic)
    rung.server_cpu, _, rung.seconds = meter.read()
    rung.rss_kib, rung.anon_kib = memory_kib(server.pid)


async def consume_rate(namesrv: str, group: str, topics: list[str], expected: int, seconds: float) -> float:
    """A lite pull consumer from the first offset over ``topics``: messages per second until ``expected``
    arrived or ``seconds`` passed, timed from when it owns every queue."""
    consumer = LitePullConsumer(
        group, namesrv, pull_batch_size=32, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    )
    for topic in topics:
        consumer.subscribe(topic, "*")
    await consumer.start()
    try:

        def owned() -> bool:
            return len(consumer.rebalancer.process_queues) >= QUEUES * len(topics)

        await wait_until(owned, 30.0)
        got, start = 0, time.monotonic()
        while got < expected and time.monotonic() - start < seconds:
            got += len(await consumer.poll(timeout=0.2))
        return got / (time.monotonic() - start)
    finally:
        await asyncio.wait_for(consumer.shutdown(), 20.0)


# --- the ladders -----------------------------------------------------------------------------------


async def topics_rung(server: Server, rung: Rung, budget: Budget) -> None:
    """``size`` topics of 4 queues; the send rate spread over all of them, then a consume rate over a few."""
    topics = [f"ScaleT{i}" for i in range(rung.size)]
    t0 = time.monotonic()
    await asyncio.wait_for(create_topics(server.namesrv, topics), budget.setup_cap)
    created = time.monotonic() - t0
    async with Producer("SCALE_PG", server.namesrv) as producer:
        await route_all(producer, topics)
        rung.notes.append(
            f"topics created in {created:.1f} s, routed in {time.monotonic() - t0 - created:.1f} s"
        )
        per_topic: Counter[str] = Counter()
        await measured_send(server, rung, producer, topics, budget, per_topic)
        read = topics[:CONSUME_TOPICS]
        extra = await send_for(producer, read, 60.0, min(CONSUME_BLOCK, budget.messages))
    stored = extra + sum(per_topic[t] for t in read)
    rung.consume_rate = await consume_rate(server.namesrv, "SCALE_CG", read, stored, budget.seconds * 2)
    rung.notes.append(f"consume: {len(read)} topics, {stored:,} msgs")


def _children(target: Callable[..., None], jobs: list[tuple[Any, ...]]) -> tuple[list[Any], Any, Any, Any]:
    ctx = multiprocessing.get_context("spawn")
    out, stop, count_now = ctx.Queue(), ctx.Event(), ctx.Event()
    procs = []
    for job in jobs:
        extra = (count_now,) if target is scale_children.group_consumers else ()
        proc = ctx.Process(target=target, args=(*job, out, stop, *extra), daemon=True)
        proc.start()
        procs.append(proc)
    return procs, out, stop, count_now


def _collect(out: Any, kind: str, expected: int, cap: float) -> list[Any]:
    """``expected`` answers of ``kind`` from the children, or raise at the first error or after ``cap``."""
    answers: list[Any] = []
    deadline = time.monotonic() + cap
    while len(answers) < expected:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError(f"{len(answers)}/{expected} client processes answered {kind!r} in {cap:.0f} s")
        try:
            what, value = out.get(timeout=min(left, 1.0))
        except Exception:
            continue
        if what == "error":
            raise RuntimeError(f"client process: {value}")
        if what == kind:
            answers.append(value)
    return answers


def _stop(procs: list[Any], stop: Any) -> None:
    stop.set()
    for proc in procs:
        proc.join(30.0)
        if proc.is_alive():
            proc.kill()
            proc.join(5.0)


async def clients_rung(server: Server, rung: Rung, budget: Budget) -> None:
    """``size`` connected producers: ``size - 1`` idle ones (connected, heartbeating) in child processes of
    up to ``IDLE_PER_PROCESS`` each, and the load from the driver's one producer."""
    topic = "ScaleClients"
    await create_topics(server.namesrv, [topic])
    idle = rung.size - 1
    jobs = [
        (
            server.namesrv,
            topic,
            first,
            min(IDLE_PER_PROCESS, idle - first),
            budget.setup_cap + budget.seconds + 60,
        )
        for first in range(0, idle, IDLE_PER_PROCESS)
    ]
    procs, out, stop, _ = _children(scale_children.idle_producers, jobs)
    try:
        connected = sum(_collect(out, "ready", len(jobs), budget.setup_cap))
        rung.notes.append(f"{connected + 1} producers connected, {len(jobs)} client processes")
        async with Producer("SCALE_PG", server.namesrv) as producer:
            await route_all(producer, [topic])
            await measured_send(server, rung, producer, [topic], budget)
    finally:
        _stop(procs, stop)


async def groups_rung(server: Server, rung: Rung, budget: Budget) -> None:
    """``size`` consumer groups on one topic, one push consumer each (child processes of up to
    ``GROUPS_PER_PROCESS``); the producer rate, then what each group was delivered in that time + 1 s."""
    topic = "ScaleGroups"
    await create_topics(server.namesrv, [topic])
    groups = [f"SCALE_CG_{i}" for i in range(rung.size)]
    chunks = [groups[i : i + GROUPS_PER_PROCESS] for i in range(0, len(groups), GROUPS_PER_PROCESS)]
    jobs = [(server.namesrv, topic, chunk, budget.setup_cap + budget.seconds + 60) for chunk in chunks]
    procs, out, stop, count_now = _children(scale_children.group_consumers, jobs)
    try:
        ready = sum(_collect(out, "ready", len(jobs), budget.setup_cap + 30))
        if ready < len(groups):
            rung.notes.append(f"only {ready}/{len(groups)} consumers owned all queues in time")
        async with Producer("SCALE_PG", server.namesrv) as producer:
            await route_all(producer, [topic])
            await measured_send(server, rung, producer, [topic], budget)
        await asyncio.sleep(1.0)
        count_now.set()
        counts: dict[str, int] = {}
        for part in _collect(out, "counts", len(jobs), 30.0):
            counts.update(part)
        per_group = [counts.get(g, 0) for g in groups]
        window = rung.seconds + 1.0
        rung.consume_rate = statistics.median(per_group) / window
        rung.notes.append(
            f"per group delivered min {min(per_group) / window:,.0f} msg/s, "
            f"median {statistics.median(per_group) / window:,.0f} msg/s "
            f"({min(per_group) / max(1, rung.messages):.0%} of sent at least); all groups "
            f"{sum(per_group) / window:,.0f} msg/s in {len(jobs)} consumer processes"
        )
    finally:
        _stop(procs, stop)


def data_bytes(path: Path) -> int:
    """Bytes the data dir takes on disk: allocated blocks, since commit log files are made at full size
    (sparse) before they fill."""
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


class Backlog:
    """The backlog ladder is cumulative: one server, filled to each rung's size in turn."""

    def __init__(self) -> None:
        self.reads = 0

    async def rung(self, server: Server, rung: Rung, budget: Budget) -> None:
        """Fill the topic to ``size`` MiB on disk (4 KiB bodies), then the send rate and a consumer
        reading from the first offset."""
        topic = "ScaleBacklog"
        target = rung.size * MIB
        have = data_bytes(server.data_dir)
        free = shutil.disk_usage(server.data_dir).free
        if target - have + DISK_MARGIN > free:
            rung.skipped = (
                f"needs {(target - have) / 1024**3:.1f} GiB more, {free / 1024**3:.1f} GiB free "
                f"on the data dir's filesystem (keeping {DISK_MARGIN / 1024**3:.0f} GiB)"
            )
            return
        await create_topics(server.namesrv, [topic])
        async with Producer("SCALE_PG", server.namesrv) as producer:
            await route_all(producer, [topic])
            body = b"b" * BACKLOG_BODY
            t0 = time.monotonic()
            while have < target and time.monotonic() - t0 < budget.setup_cap:
                step = max(BACKLOG_BATCH, (target - have) // BACKLOG_BODY)
                await send_for(producer, [topic], 10.0, step, body, BACKLOG_BATCH, 4)
                have = data_bytes(server.data_dir)
            rung.notes.append(f"{have / MIB:,.0f} MiB on disk after {time.monotonic() - t0:.0f} s filling")
            if have < target:
                rung.notes.append("fill stopped at its time cap")
            await measured_send(server, rung, producer, [topic], budget)
        self.reads += 1
        rung.consume_rate = await consume_rate(
            server.namesrv, f"SCALE_BACKLOG_{self.reads}", [topic], 10**12, budget.seconds
        )


class Timers:
    """The timers ladder is cumulative: one server, its pending timers raised to each rung's count."""

    def __init__(self) -> None:
        self.pending = 0

    async def rung(self, server: Server, rung: Rung, budget: Budget) -> None:
        """Raise the pending timer messages (due in 2 days, sent one by one: a batch cannot carry timers)
        to ``size``, then the send rate of normal messages on another topic."""
        await create_topics(server.namesrv, ["ScaleTimers", "ScaleNormal"])
        async with Producer("SCALE_PG", server.namesrv) as producer:
            await route_all(producer, ["ScaleTimers", "ScaleNormal"])
            gate = asyncio.Semaphore(TIMER_WINDOW)
            failures: list[BaseException] = []
            t0 = time.monotonic()

            def settled(f: asyncio.Future[Any]) -> None:
                gate.release()
                if f.cancelled() or f.exception() is not None:
                    failures.append(f.exception() or asyncio.CancelledError())

            while self.pending < rung.size and time.monotonic() - t0 < budget.setup_cap and not failures:
                await gate.acquire()
                producer.send_async(Message("ScaleTimers", b"t" * 64, delay=TIMER_DELAY)).add_done_callback(
                    settled
                )
                self.pending += 1
            for _ in range(TIMER_WINDOW):
                await asyncio.wait_for(gate.acquire(), 30.0)
            if failures:
                raise RuntimeError(f"timer send failed: {failures[0]!r}")
            rung.notes.append(f"{self.pending:,} timers pending, {time.monotonic() - t0:.0f} s to send")
            if self.pending < rung.size:
                rung.notes.append("timer sends stopped at their time cap")
            await measured_send(server, rung, producer, ["ScaleNormal"], budget)


LADDERS: dict[str, tuple[str, str]] = {
    # name: (what a rung's size counts, unit)
    "topics": ("topics (4 queues each)", ""),
    "clients": ("connected producers", ""),
    "groups": ("consumer groups on one topic", ""),
    "backlog": ("backlog on disk", "MiB"),
    "timers": ("pending timer messages", ""),
}
FULL_RUNGS: dict[str, list[int]] = {
    "topics": [1, 10, 100, 1000, 10_000],
    "clients": [1, 10, 100, 500, 1000, 2000],
    "groups": [1, 10, 50, 100, 500],
    "backlog": [1024, 2048, 5120, 10_240, 20_480],
    "timers": [0, 10_000, 100_000, 1_000_000],
}
QUICK_RUNGS: dict[str, list[int]] = {
    "topics": [1, 100, 1000],
    "clients": [1, 50, 200],
    "groups": [1, 5, 20],
    "backlog": [64, 256],
    "timers": [0, 10_000, 50_000],
}
CUMULATIVE = {"backlog", "timers"}
