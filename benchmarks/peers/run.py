"""tidemq against Redis Streams, RabbitMQ, NATS JetStream, the Apache RocketMQ Java broker and Apache Kafka
(and tidemq's NSQ side), same four workloads.

Every broker runs on 127.0.0.1 as a plain child process with its data in a temp dir and is stopped by its
PID; every producer and consumer is a separate client child process (``run.py --client SPEC``).  Bodies
are 1 KiB and start with (sequence number, ``time.time_ns()`` before the send call).

* W1 one producer sends ``--messages`` (200,000) as fast as its client allows (the batching/pipelining
  named in the variant); msgs/s = acknowledged messages / (first send -> last acknowledgement).
* W2 one consumer of a group (a channel for NSQ) consumes and acknowledges W1's backlog; msgs/s =
  distinct messages / (first received -> last acknowledgement sent).
* W3 a consumer, then a producer (two processes) with 100,000 messages; msgs/s = distinct messages
  received / (first send -> last receive); latency = receive time - send time in the body.
* W4 the same with the producer paced at 5,000 msg/s by an absolute schedule (single sends) for 10 s.

Broker CPU is utime+stime (+ reaped children) of the broker's process tree from /proc over the workload;
client CPU is the rusage of the client children (``os.wait4``); broker peak RSS is the sum of VmHWM over
the tree, reset before each workload through /proc/PID/clear_refs when allowed.  Every loop is bounded by
its count and a time cap; a row that hit its cap says so.  Progress goes to stderr, tables to stdout.

Usage: ``.venv/bin/python benchmarks/peers/run.py [--quick] [--systems ...] [--workloads ...]
[--messages N] [--repeat N] [--rate W4_MSGS_PER_S]``
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench_common and nsq_workloads
sys.path.append(str(Path(__file__).resolve().parents[2]))  # tests.rocketmq_cluster (rocketmq-java)

import argparse
import importlib
import json
import logging
import os
import signal
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from clientlib import BODY, Spec, Tally, emit
from plan import MODULES, Limits, Variant, brokers, go_client, missing, plan_for
from procs import Broker, Child, reset_hwm, tree_cpu, tree_hwm_mib
from report import WORKLOADS, Row, cpu_table, median_rows, ratio_table, results_table

from bench_common import arg_parser, describe, machine

FULL = Limits(w1=200_000, w3=100_000, rate=5_000, w4_seconds=10.0, cap=60.0, drain=15.0)
QUICK = Limits(w1=20_000, w3=10_000, rate=5_000, w4_seconds=3.0, cap=20.0, drain=10.0)
READY_TIMEOUT = 60.0


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --- one workload ------------------------------------------------------------------------------------


@dataclass
class Context:
    broker: Broker
    limits: Limits
    log_dir: Path
    rss_reset: bool = True


Answer = dict[str, Any]  # a client child's JSON line (and the spec it was started with)


def _spec(ctx: Context, role: str, name: str, count: int, cap: float, extra: Answer) -> Answer:
    base = Spec(ctx.broker.system, role, ctx.broker.target(), name, count, cap, drain=ctx.limits.drain)
    return asdict(replace(base, **extra))


def measure(
    ctx: Context, row: Row, producer: Answer | None, consumer: Answer | None
) -> tuple[Answer, Answer]:
    """Run the children (consumer first, ready before the producer starts) with the broker measured."""
    roots = ctx.broker.roots()
    ctx.rss_reset = reset_hwm(roots) and ctx.rss_reset
    cpu0 = tree_cpu(roots)
    children: list[Child] = []
    p_out: Answer = {}
    c_out: Answer = {}
    try:
        if consumer is not None:
            children.append(Child(consumer, ctx.log_dir))
            if producer is not None:
                children[-1].wait_ready(READY_TIMEOUT)
        if producer is not None:
            children.append(Child(producer, ctx.log_dir))
            p_out = children[-1].finish()
        if consumer is not None:
            if producer is not None:
                children[0].tell(int(p_out["acked"]))
            c_out = children[0].finish()
    finally:
        for child in children:
            child.kill()
        row.client_cpu = sum(c.cpu for c in children)
        row.producer_cpu = sum(c.cpu for c in children if c.spec["role"] == "produce")
        row.broker_cpu = tree_cpu(roots) - cpu0
        row.broker_rss_mib = tree_hwm_mib(roots)
    return p_out, c_out


def producer_notes(row: Row, p: Answer) -> None:
    if p["capped"]:
        row.notes.append(f"producer hit its {row.workload.upper()} time cap")
    if p["failed"]:
        row.notes.append(f"{p['failed']:,} sends failed ({p['first_error']})")


def consumer_notes(row: Row, c: Answer, acked: int) -> None:
    if c["distinct"] < c["expected"]:
        row.notes.append(f"consumer stopped at its time cap: {c['distinct']:,} of {c['expected']:,}")
    elif c["distinct"] < acked:
        row.notes.append(f"MISSING {acked - c['distinct']:,} acknowledged messages")
    if c["duplicates"]:
        row.notes.append(f"{c['duplicates']:,} duplicate deliveries")
    if c["foreign"]:
        row.notes.append(f"{c['foreign']:,} unexpected messages")


def run_w1(ctx: Context, row: Row, v: Variant, name: str, groups: list[str]) -> int:
    spec = _spec(ctx, "produce", name, ctx.limits.w1, ctx.limits.cap, {**v.produce, "groups": groups})
    p, _ = measure(ctx, row, spec, None)
    row.messages, row.seconds = p["acked"], p["seconds"]
    producer_notes(row, p)
    return int(p["acked"])


def run_w2(ctx: Context, row: Row, v: Variant, name: str, group: str, backlog: int) -> None:
    spec = _spec(ctx, "consume", name, backlog, ctx.limits.cap, {**v.consume, "group": group, "drain": 0.0})
    _, c = measure(ctx, row, None, spec)
    row.messages = c["distinct"]
    end = c["end_ns"] if c["distinct"] >= c["expected"] else c["last_ns"]
    row.seconds = max(1e-9, (end - c["first_ns"]) / 1e9)
    consumer_notes(row, c, backlog)


def run_live(ctx: Context, row: Row, v: Variant, name: str, group: str) -> None:
    lim = ctx.limits
    paced = row.workload == "w4"
    count = int(lim.rate * lim.w4_seconds) if paced else lim.w3
    rate = float(lim.rate) if paced else 0.0
    cap = 2 * lim.w4_seconds if paced else lim.cap
    extra = {"rate": rate, "group": group}
    p_spec = _spec(ctx, "produce", name, count, cap, {**v.produce, **extra})
    c_spec = _spec(ctx, "consume", name, count, cap, {**v.consume, **extra, "live": True})
    p, c = measure(ctx, row, p_spec, c_spec)
    row.messages = c["distinct"]
    row.seconds = max(1e-9, (c["last_ns"] - p["first_sent_ns"]) / 1e9)
    row.p50_ms, row.p99_ms, row.max_ms = c["p50_ms"], c["p99_ms"], c["max_ms"]
    sent_rate = p["acked"] / p["seconds"] if p["seconds"] else 0.0
    if paced and sent_rate < 0.95 * lim.rate:
        row.notes.append(f"PRODUCER BELOW TARGET: {sent_rate:,.0f} msg/s")
    elif not paced:
        row.notes.append(f"sent at {sent_rate:,.0f} msg/s")
    producer_notes(row, p)
    consumer_notes(row, c, int(p["acked"]))


def run_broker(broker: Broker, variants: list[Variant], ctx: Context, rep: int) -> list[Row]:
    rows: list[Row] = []
    w2 = [v for v in variants if v.workload == "w2"]
    groups = [f"g{rep}x{j}" for j in range(len(w2))]
    backlog: tuple[str, int] | None = None
    for i, v in enumerate(variants):
        row = Row(broker.label, broker.system, broker.durability, v.workload, v.label)
        name = f"{v.workload}r{rep}v{i}"
        started = time.monotonic()
        try:
            if not broker.alive():
                raise RuntimeError(f"broker is not running: {broker.log_tail(500)}")
            if v.workload == "w1":
                acked = run_w1(ctx, row, v, name, groups if backlog is None else [])
                backlog = backlog or (name, acked)
            elif v.workload == "w2":
                if backlog is None:
                    raise RuntimeError("no backlog: W2 consumes what W1 sent (W1 not selected or failed)")
                run_w2(ctx, row, v, backlog[0], groups[w2.index(v)], backlog[1])
            else:
                run_live(ctx, row, v, name, f"g{rep}{name}")
        except Exception as exc:
            row.error = describe(exc)[:600]
        took = time.monotonic() - started
        rows.append(row)
        status = row.error or (
            f"{row.messages:,} msgs, {row.rate:,.0f} msg/s"
            + (f", p50 {row.p50_ms:.1f} p99 {row.p99_ms:.1f} ms" if row.p99_ms is not None else "")
            + (f" [{'; '.join(row.notes)}]" if row.notes else "")
        )
        log(f"  {broker.label:18} {WORKLOADS[v.workload]:20} {v.label:28} {status} ({took:.1f} s)")
    return rows


# --- driver ------------------------------------------------------------------------------------------


def run_rep(broker: Broker, variants: list[Variant], ctx: Context, rep: int) -> list[Row]:
    """Start the broker (on its data of earlier runs), run every workload once, stop it."""
    started = time.monotonic()
    try:
        broker.start()
        took = time.monotonic() - started
        log(f"{broker.label} (run {rep + 1}): started in {took:.1f} s, pids {broker.roots()}")
        return run_broker(broker, variants, ctx, rep)
    finally:
        broker.stop()


def bench(args: argparse.Namespace, limits: Limits) -> tuple[list[Row], list[str], bool]:
    """The systems' runs in turn: run 1 of each, then run 2 of each, and so on. The machine's speed drifts
    over minutes; measured one after the other, each system had a stretch of time of its own, and the drift
    went into the ratios between them."""
    todo = brokers(args.systems)
    settings = [broker.settings() for broker in todo]
    with_go = not args.quick and go_client()
    if not args.quick and not with_go:
        log("no rocketmq-client-go rows: `make rocketmq-go-bench` builds the Go peer")
    plans = {
        broker.label: [v for v in plan_for(broker.system, with_go) if v.workload in args.workloads]
        for broker in todo
    }
    runs: dict[str, list[list[Row]]] = {broker.label: [] for broker in todo}
    failures: dict[str, str] = {}
    rows: list[Row] = []
    try:
        with tempfile.TemporaryDirectory(prefix="peers-clients-") as tmp:
            contexts = {broker.label: Context(broker, limits, Path(tmp)) for broker in todo}
            for rep in range(args.repeat):
                for broker in todo:
                    if broker.label in failures:
                        continue
                    try:
                        runs[broker.label].append(
                            run_rep(broker, plans[broker.label], contexts[broker.label], rep)
                        )
                    except Exception as exc:
                        log(f"{broker.label}: FAILED: {describe(exc)}")
                        failures[broker.label] = describe(exc)[:300]
            rss_reset = all(ctx.rss_reset for ctx in contexts.values())
    finally:
        for broker in todo:
            broker.cleanup()
    for broker in todo:
        if broker.label in failures:
            error = failures[broker.label]
            rows += [Row(broker.label, broker.system, broker.durability, v.workload, v.label, error=error)
                     for v in plans[broker.label]]  # fmt: skip
        elif runs[broker.label] and runs[broker.label][0]:
            rows += median_rows(runs[broker.label])
    return rows, settings, rss_reset


def _exit_with_parent(parent: int) -> None:
    """A client child whose driver died (and so cannot stop it) exits instead of running on."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(3)


def client_main(spec_json: str) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    spec = Spec(**json.loads(spec_json))
    module = importlib.import_module(MODULES[spec.system])
    try:
        if spec.role == "produce":
            emit(module.produce(spec))
        else:
            tally = Tally(spec)
            module.consume(spec, tally)
            emit(tally.result())
    except Exception as exc:
        logging.exception("client failed")
        emit({"error": describe(exc)})
        return 1
    return 0


def main() -> int:
    parser = arg_parser(__doc__, "tidemq only (async and sync), small counts")
    parser.add_argument("--client", metavar="SPEC", help=argparse.SUPPRESS)
    parser.add_argument("--systems", default=None, help=f"comma list of {','.join(MODULES)}")
    parser.add_argument("--workloads", default="w1,w2,w3,w4", help="comma list of w1,w2,w3,w4")
    parser.add_argument("--messages", type=int, default=None, help="W1/W2 messages (default 200000)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per workload; the median run is shown")
    parser.add_argument("--rate", type=int, default=None, help="W4 msg/s (default 5000)")
    args = parser.parse_args()
    if args.client:
        return client_main(args.client)

    def terminate(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)  # so the finally blocks stop the brokers and children

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    limits = QUICK if args.quick else FULL
    if args.messages:
        limits = replace(limits, w1=args.messages)
    if args.rate:
        limits = replace(limits, rate=args.rate)
    default = "tidemq" if args.quick else ",".join(MODULES)
    args.systems = [s.strip() for s in (args.systems or default).split(",") if s.strip()]
    args.workloads = [w.strip().lower() for w in args.workloads.split(",") if w.strip()]
    unknown = [s for s in args.systems if s not in MODULES] + [
        w for w in args.workloads if w not in WORKLOADS
    ]
    if unknown or args.repeat < 1:
        parser.error(f"unknown systems/workloads {unknown}" if unknown else "--repeat must be >= 1")
    if lacking := missing(args.systems):
        parser.error(f"missing {', '.join(lacking)}: `make bench-peers` installs them (or pick --systems)")

    started = time.monotonic()
    rows, settings, rss_reset = bench(args, limits)
    print(machine())
    print(
        f"Bodies {BODY} B; W1/W2 {limits.w1:,} messages, W3 {limits.w3:,}, W4 {limits.rate:,} msg/s for "
        f"{limits.w4_seconds:g} s; time cap {limits.cap:g} s per loop (+{limits.drain:g} s drain); "
        f"{args.repeat} run(s) per row. Broker CPU: utime+stime of the broker's process tree (/proc) over "
        f"the workload; client CPU: rusage of the client processes; broker peak RSS: sum of VmHWM over the "
        + ("tree, reset before each workload (clear_refs)" if rss_reset else "tree since broker start")
        + ", counting mapped file pages (e.g. tidemq's mmapped commit log)."
    )
    print("Settings:")
    for line in settings:
        print(f"- {line}")
    peers = [r for r in rows if r.family != "tidemq-nsq"]
    nsq = [r for r in rows if r.family == "tidemq-nsq"]
    others = [r for r in rows if r.family not in ("tidemq", "tidemq-nsq")]
    if peers:
        print("\n" + results_table(peers))
        print("\nRatio: tidemq (RocketMQ side) / best peer at equal durability (W1-W3 msgs/s: >1 is faster; "
              "W4 p99: <1 is lower latency)\n")  # fmt: skip
        print(ratio_table(peers, "tidemq"))
        print("\nCPU per message of each process (W3, W4; utime+stime over the workload / messages)\n")
        print(cpu_table(peers))
    if nsq:
        print("\n" + results_table(nsq))
        print("\nRatio: tidemq NSQ side / best peer at equal durability (same rules)\n")
        print(ratio_table(nsq + others, "tidemq-nsq"))
        print("\nCPU per message of each process (same rules)\n")
        print(cpu_table(nsq))
    print(f"\nTotal wall time {time.monotonic() - started:.1f} s")
    return 1 if any(r.error or any("MISSING" in n for n in r.notes) for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
