"""Rows, the results tables and the tidemq-to-best-peer ratio tables (markdown on stdout)."""

from __future__ import annotations

from dataclasses import dataclass, field

from clientlib import BODY

from bench_common import MIB, md_row

WORKLOADS = {
    "w1": "W1 produce",
    "w2": "W2 consume backlog",
    "w3": "W3 produce+consume",
    "w4": "W4 paced",
}
TIDEMQ = ("tidemq", "tidemq-nsq")


@dataclass
class Row:
    system: str  # the broker's label, e.g. "redis always"
    family: str  # "redis", "rabbitmq", "nats", "tidemq", "tidemq-nsq"
    durability: str  # "async" or "sync"
    workload: str  # "w1".."w4"
    variant: str
    messages: int = 0
    seconds: float = 0.0
    broker_cpu: float = 0.0
    client_cpu: float = 0.0
    producer_cpu: float = 0.0  # the part of client_cpu that is the producer's process
    broker_rss_mib: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    notes: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 and not self.error else 0.0

    @property
    def key(self) -> tuple[str, str, str]:
        return self.system, self.workload, self.variant

    def score(self) -> float:
        """Bigger is better: msgs/s, or for the paced workload the negated p99."""
        if self.error or not self.messages:
            return float("-inf")
        if self.workload == "w4":
            return -(self.p99_ms if self.p99_ms is not None else float("inf"))
        return self.rate


def median_rows(runs: list[list[Row]]) -> list[Row]:
    """Per (system, workload, variant): the run with the median score (the lower middle one when even)."""
    out: list[Row] = []
    for row in runs[0]:
        same = sorted((r for run in runs for r in run if r.key == row.key), key=Row.score)
        chosen = same[(len(same) - 1) // 2]
        if len(runs) > 1:
            chosen.notes.append(f"median of {len(same)} runs: " + " / ".join(_value(s) for s in same))
        out.append(chosen)
    return out


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


HEADER = [
    "| system | class | workload | variant | msgs | msgs/s | MiB/s | broker CPU s | client CPU s "
    "| broker peak RSS MiB | p50 ms | p99 ms | max ms | notes |",
    "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
]


def results_table(rows: list[Row]) -> str:
    lines = list(HEADER)
    for r in rows:
        label = WORKLOADS[r.workload]
        if r.error:
            lines.append(md_row([r.system, r.durability, label, r.variant, "FAILED", *[""] * 8, r.error]))
            continue
        lines.append(
            md_row([
                r.system, r.durability, label, r.variant, f"{r.messages:,}", f"{r.rate:,.0f}",
                f"{r.rate * BODY / MIB:.1f}", f"{r.broker_cpu:.1f}", f"{r.client_cpu:.1f}",
                f"{r.broker_rss_mib:,.0f}", _ms(r.p50_ms), _ms(r.p99_ms), _ms(r.max_ms), "; ".join(r.notes),
            ])
        )  # fmt: skip
    return "\n".join(lines)


def _best(rows: list[Row]) -> Row | None:
    candidates = [r for r in rows if r.score() != float("-inf")]
    return max(candidates, key=Row.score) if candidates else None


def _value(row: Row) -> str:
    if row.error:
        return "failed"
    if row.workload == "w4":
        return f"p99 {_ms(row.p99_ms)} ms"
    return f"{row.rate:,.0f} msgs/s"


def ratio_table(rows: list[Row], family: str) -> str:
    """``family`` (tidemq or tidemq-nsq) against the peers: its async class against the best of all peers,
    its sync class against the best peer of the sync class; per workload its best variant."""
    lines = [
        "| workload | tidemq (class, best variant) | tidemq | best peer (variant) | peer | ratio |",
        "|---|---|---:|---|---:|---:|",
    ]
    peers = [r for r in rows if r.family not in TIDEMQ]
    for workload, label in WORKLOADS.items():
        for durability in ("async", "sync"):
            ours = _best([r for r in rows if r.family == family and r.durability == durability
                          and r.workload == workload])  # fmt: skip
            if ours is None:
                continue
            pool = [
                r
                for r in peers
                if r.workload == workload and (durability == "async" or r.durability == "sync")
            ]
            theirs = _best(pool)
            who = f"{ours.system} ({ours.variant})"
            if theirs is None:
                lines.append(md_row([label, who, _value(ours), "no peer measured", "", ""]))
                continue
            if workload == "w4":
                ratio = f"{(ours.p99_ms or 0) / theirs.p99_ms:.2f}x p99" if theirs.p99_ms else ""
            else:
                ratio = f"{ours.rate / theirs.rate:.2f}x" if theirs.rate else ""
            lines.append(
                md_row(
                    [label, who, _value(ours), f"{theirs.system} ({theirs.variant})", _value(theirs), ratio]
                )
            )
    return "\n".join(lines)


def cpu_table(rows: list[Row]) -> str:
    """CPU per message of each process: where a workload's time goes on two shared cores (W3 and W4, where
    producer, broker and consumer run at once)."""
    lines = [
        "| system | workload | variant | msgs | broker µs/msg | producer µs/msg | consumer µs/msg "
        "| all µs/msg |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if r.error or not r.messages or r.workload not in ("w3", "w4"):
            continue
        per = 1e6 / r.messages
        consumer = r.client_cpu - r.producer_cpu
        lines.append(
            md_row([
                r.system, WORKLOADS[r.workload], r.variant, f"{r.messages:,}", f"{r.broker_cpu * per:.1f}",
                f"{r.producer_cpu * per:.1f}", f"{consumer * per:.1f}",
                f"{(r.broker_cpu + r.client_cpu) * per:.1f}",
            ])
        )  # fmt: skip
    return "\n".join(lines)
