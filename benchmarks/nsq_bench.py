"""NSQ benchmark: tidemq's nsqd-compatible server driven by tidemq's own asyncio NSQ client.

One ``python -m tidemq nsqd --flush MODE`` child process is started per flush mode (``--flush async``,
the default, ``sync`` or ``both``: async then a fresh sync server) on free 127.0.0.1 ports with a
temporary data directory (``Nsqd`` in nsq_workloads.py, a ``bench_common.Server``, stopped by its PID).
Every workload uses a fresh topic; bodies are random, 1 KiB unless ``--body-size`` says otherwise.
Producer and consumer run in this process, on one event loop.

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

Server CPU is utime + stime of the nsqd PID from /proc/<pid>/stat; client CPU is ``time.process_time()``
of this process (producer and consumer together in paced rows).  Both are CPU seconds over the row's
wall time, with that as a percentage of one core.  Every workload stops at its message budget or its
time cap, whichever comes first.

Usage: ``.venv/bin/python benchmarks/nsq_bench.py [--quick] [--flush async|sync|both] [--body-size N]``
"""

from __future__ import annotations

import asyncio
import logging
import os
import platform
import sys
import time
from collections.abc import Awaitable, Callable

from bench_common import (
    MIB,
    WarningCounter,
    arg_parser,
    cpu_model,
    describe,
    fmt_size,
    md_row,
    rate,
    report,
    with_server,
)
from nsq_workloads import (
    FULL,
    HEADER,
    MAX_IN_FLIGHT,
    MPUB_BATCHES,
    MPUB_WINDOW,
    QUICK,
    SLACK,
    WINDOW,
    Nsqd,
    ProduceFn,
    Pumped,
    Row,
    Settings,
    drain_row,
    paced_row,
    pipelined,
    producer_row,
    pub_sequential,
)
from tidemq.nsq.client import Producer

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
    report(row, digits=2)
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
    return with_server(Nsqd(s.flush), lambda server: asyncio.run(bench(server, s)))


# --- report ------------------------------------------------------------------------------------------


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
        lines.append(md_row(cells))
    return "\n".join(lines)


def main() -> int:
    parser = arg_parser(__doc__)
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
        f"body {fmt_size(args.body_size)}"
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
        print(warnings.summary())
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
