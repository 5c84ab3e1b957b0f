"""Scale ladder: tidemq server's throughput and RSS as the work grows (issue 24, item 6).

Ladders (``--ladder``, comma separated): topics 1 -> 10,000 (4 queues each), connected producers
1 -> 2,000, consumer groups 1 -> 500 on one topic, backlog 1 -> 20 GiB on disk, pending timer messages
0 -> 1M. Each rung of topics, clients and groups gets a fresh ``tidemq server --flush async`` (RocketMQ
side only); backlog and timers are cumulative, one server climbing their rungs. Each rung prints a row:
throughput (msg/s), its ratio to the ladder's smallest rung, the broker's VmRSS and RssAnon, and its CPU
seconds per 1,000 messages. The tables go to stdout, one PNG per ladder into ``--out``.

    python benchmarks/scale.py --quick                         # every ladder, small rungs (~2 minutes)
    python benchmarks/scale.py --ladder topics,groups          # full rungs
    python benchmarks/scale.py --ladder topics --rungs 1,100,10000 --seconds 10
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import scale_ladders as sl
from bench_common import Server, arg_parser, describe, machine, md_row

#: TIDEMQ_SCALE_PROFILE=DIR runs each server under cProfile, one ``broker-<ladder>-<rung>.prof`` per server
#: (written when it stops; read with ``python -m pstats``).
PROFILE_DIR = Path(os.environ["TIDEMQ_SCALE_PROFILE"]) if os.environ.get("TIDEMQ_SCALE_PROFILE") else None
RungRun = Callable[[Server, sl.Rung, sl.Budget], Awaitable[None]]


class UncappedServer(Server):
    """The clients ladder's server: every client connects from 127.0.0.1, and the default cap of 1,000
    connections per IP would refuse the 1,000th, so it runs without caps, as a host with that many local
    clients would be configured."""

    def command(self) -> list[str]:
        return [*super().command(), "--max-connections-per-ip", "0", "--max-connections", "0"]


def run_ladder(name: str, rungs: list[int], budget: sl.Budget) -> list[sl.Rung]:
    results: list[sl.Rung] = []
    fresh: dict[str, RungRun] = {
        "topics": sl.topics_rung,
        "clients": sl.clients_rung,
        "groups": sl.groups_rung,
    }
    server: Server | None = None
    step: RungRun | None = fresh.get(name)
    if name in sl.CUMULATIVE:
        step = sl.Backlog().rung if name == "backlog" else sl.Timers().rung
    assert step is not None
    try:
        for size in sorted(rungs):
            rung = sl.Rung(name, size)
            results.append(rung)
            if server is None or name not in sl.CUMULATIVE:
                server = (UncappedServer if name == "clients" else Server)("async")
                if PROFILE_DIR:
                    PROFILE_DIR.mkdir(parents=True, exist_ok=True)
                    path = PROFILE_DIR / f"broker-{name}-{size}.prof"
                    server.interpreter_args = ["-m", "cProfile", "-o", str(path)]
                server.start()
                print(f"{name} {size}: server pid {server.pid}, data dir {server.data_dir}", file=sys.stderr)
            try:
                asyncio.run(step(server, rung, budget))
            except Exception as exc:
                rung.error = describe(exc)
                print(f"  server log tail:\n{server.log_tail(1500)}", file=sys.stderr)
            print(f"  {row_text(rung, results)}", file=sys.stderr)
            if name not in sl.CUMULATIVE or rung.error:
                server.stop()
                server.cleanup()
                server = None
    finally:
        if server is not None:
            server.stop()
            server.cleanup()
    return results


def baseline(results: list[sl.Rung]) -> sl.Rung | None:
    return next((r for r in results if r.messages and not r.error and not r.skipped), None)


def size_text(rung: sl.Rung) -> str:
    unit = sl.LADDERS[rung.ladder][1]
    if unit == "MiB":
        return f"{rung.size / 1024:g} GiB" if rung.size >= 1024 else f"{rung.size} MiB"
    return f"{rung.size:,}"


def row_cells(rung: sl.Rung, results: list[sl.Rung]) -> list[str]:
    if rung.skipped or rung.error:
        return [size_text(rung), "-", "-", "-", "-", "-", "-", f"{'skipped' if rung.skipped else 'FAILED'}: "
                f"{rung.skipped or rung.error}"]  # fmt: skip
    base = baseline(results)
    ratio = f"{rung.rate / base.rate:.2f}" if base and base.rate else "-"
    consume = f"{rung.consume_rate:,.0f}" if rung.consume_rate is not None else "-"
    cpu = f"{rung.cpu_per_1k:.3f}" if rung.cpu_per_1k is not None else "-"
    return [
        size_text(rung),
        f"{rung.rate:,.0f}",
        ratio,
        consume,
        f"{rung.rss_kib / 1024:,.0f}",
        f"{rung.anon_kib / 1024:,.0f}",
        cpu,
        "; ".join(rung.notes),
    ]


def row_text(rung: sl.Rung, results: list[sl.Rung]) -> str:
    cells = row_cells(rung, results)
    return f"{rung.ladder} {cells[0]}: {cells[1]} msg/s (x{cells[2]}), RSS {cells[4]} MiB, {cells[7]}"


HEADER = [
    "rung", "send msg/s", "ratio", "consume msg/s", "VmRSS MiB", "RssAnon MiB", "broker CPU s / 1k msgs",
    "notes",
]  # fmt: skip


def table(name: str, results: list[sl.Rung]) -> str:
    lines = [f"### {name}: {sl.LADDERS[name][0]}", "", md_row(HEADER), md_row(["---"] * len(HEADER))]
    lines += [md_row(row_cells(r, results)) for r in results]
    base = baseline(results)
    low = [r for r in results if base and r.messages and not r.error and r.rate < 0.8 * base.rate]
    if low:
        lines += ["", "More than 20% below the smallest rung: " + ", ".join(size_text(r) for r in low)]
    return "\n".join(lines)


def plot(name: str, results: list[sl.Rung], out: Path, title_note: str) -> Path | None:
    """Throughput (left axis) and broker RSS (right axis) against the rung, log x where it spans decades."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in results if r.messages and not r.error and not r.skipped]
    if not done:
        return None
    xs = [r.size for r in done]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(xs, [r.rate for r in done], "o-", color="tab:blue", label="send msg/s")
    if any(r.consume_rate is not None for r in done):
        label = "median delivery per group msg/s" if name == "groups" else "consume msg/s"
        ax.plot(xs, [r.consume_rate or 0 for r in done], "s--", color="tab:cyan", label=label)
    ax.set_xlabel(sl.LADDERS[name][0] + (f" ({sl.LADDERS[name][1]})" if sl.LADDERS[name][1] else ""))
    ax.set_ylabel("msg/s")
    ax.set_ylim(bottom=0)
    if min(xs) > 0 and max(xs) / min(xs) >= 10:
        ax.set_xscale("log")
    elif 0 in xs and max(xs) >= 1000:
        ax.set_xscale("symlog", linthresh=max(1, min(x for x in xs if x) // 10 or 1))
    rss = ax.twinx()
    rss.plot(xs, [r.rss_kib / 1024 for r in done], "^-", color="tab:red", label="VmRSS MiB")
    rss.plot(xs, [r.anon_kib / 1024 for r in done], "v:", color="tab:orange", label="RssAnon MiB")
    rss.set_ylabel("broker RSS (MiB)")
    rss.set_ylim(bottom=0)
    handles = ax.get_legend_handles_labels()[0] + rss.get_legend_handles_labels()[0]
    ax.legend(handles, [str(h.get_label()) for h in handles], loc="lower left", fontsize=8)
    ax.set_title(f"tidemq scale ladder: {name} ({title_note})", fontsize=10)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"scale-{name}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main() -> None:
    parser = arg_parser(__doc__, "small rungs and 2 s phases (about 2 minutes for every ladder)")
    parser.add_argument("--ladder", default=",".join(sl.LADDERS), help="comma-separated ladders to climb")
    parser.add_argument("--rungs", help="comma-separated rung sizes (backlog in MiB) for every chosen ladder")
    parser.add_argument("--seconds", type=float, help="measured send phase per rung (default 2, full 8)")
    parser.add_argument("--messages", type=int, default=2_000_000, help="message cap per measured phase")
    parser.add_argument("--setup-cap", type=float, help="seconds for a rung's setup (default 60, full 900)")
    parser.add_argument("--out", type=Path, default=Path("var/scale"), help="folder for the PNG plots")
    parser.add_argument("--label", default="", help="said in the plot titles (e.g. 'loaded machine')")
    args = parser.parse_args()
    names = [n.strip() for n in args.ladder.split(",") if n.strip()]
    unknown = [n for n in names if n not in sl.LADDERS]
    if unknown:
        parser.error(f"unknown ladder {', '.join(unknown)}; choose from {', '.join(sl.LADDERS)}")
    budget = sl.Budget(
        seconds=args.seconds or (2.0 if args.quick else 8.0),
        messages=args.messages,
        setup_cap=args.setup_cap or (60.0 if args.quick else 900.0),
    )
    note = args.label or ("quick" if args.quick else "full")
    print(machine())
    print(
        f"Settings: tidemq server --flush async (RocketMQ side only), fresh per rung except backlog and "
        f"timers; send phase {budget.seconds:g} s or {budget.messages:,} msgs, send_batch of "
        f"{sl.BATCH} x {sl.BODY} B, {sl.WINDOW} requests in flight, one producer in this process"
    )
    started = time.monotonic()
    for name in names:
        rungs = [int(x) for x in args.rungs.split(",")] if args.rungs else None
        rungs = rungs or (sl.QUICK_RUNGS if args.quick else sl.FULL_RUNGS)[name]
        results = run_ladder(name, rungs, budget)
        print()
        print(table(name, results))
        path = plot(name, results, args.out, note)
        if path:
            print(f"\nplot: {path}")
        sys.stdout.flush()
    print(f"\n(total {time.monotonic() - started:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
