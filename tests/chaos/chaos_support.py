"""The chaos suite's shared parts: a server that can be SIGKILLed and restarted on the same data dir and
ports, a peak-RSS sampler reading /proc, the acknowledged/consumed accounting, and the report rows the
conftest prints (and, for the long run, writes into docs/reliability.md)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import ServerProcess

LONG = os.environ.get("TIDEMQ_CHAOS", "") == "long"
HERE = Path(__file__).parent


def rounds(short: int, long: int = 100) -> int:
    """SIGKILL rounds: ``TIDEMQ_CHAOS_ROUNDS`` wins, else the long run's count under ``make chaos``."""
    override = os.environ.get("TIDEMQ_CHAOS_ROUNDS")
    return int(override) if override else (long if LONG else short)


@dataclass
class Row:
    """One scenario's line of the reliability table."""

    scenario: str
    acknowledged: int
    lost: int
    duplicates: int
    stalls: str = "-"
    peak_rss_mb: float = 0.0
    note: str = ""


ROWS: list[Row] = []


def report(row: Row) -> Row:
    ROWS.append(row)
    print(f"\nchaos: {row}")
    return row


@dataclass
class Tally:
    """What one protocol's producer saw acknowledged, to check against what a consumer got back."""

    protocol: str
    acknowledged: set[str] = field(default_factory=set)
    failed: int = 0

    def check(self, consumed: Iterable[str]) -> tuple[int, int, set[str]]:
        """(lost, duplicates, lost bodies): duplicates count every extra copy of a body."""
        counts = collections.Counter(consumed)
        lost = self.acknowledged - counts.keys()
        return len(lost), sum(n - 1 for n in counts.values() if n > 1), lost


def judge(
    tallies: dict[str, Tally], seen: dict[str, list[str]], title: Callable[[str], str], peak_rss_mb: float
) -> None:
    """Report one row per protocol (``title(protocol)``) and fail if any acknowledged message was not seen."""
    failures = []
    for protocol, tally in tallies.items():
        lost, duplicates, missing = tally.check(seen[protocol])
        report(
            Row(
                title(protocol),
                len(tally.acknowledged),
                lost,
                duplicates,
                peak_rss_mb=peak_rss_mb,
                note=f"{tally.failed} sends failed (unacknowledged)",
            )
        )
        if lost:
            failures.append(f"{protocol}: {lost} acknowledged never seen again, e.g. {sorted(missing)[:5]}")
        assert tally.acknowledged, f"{protocol}: nothing acknowledged at all"
    assert not failures, failures


def vm_rss_mb(pid: int) -> float:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class ChaosServer:
    """A ``tidemq server`` killed with SIGKILL and restarted on the same data dir and ports; its peak RSS
    over every incarnation is sampled from /proc while it runs."""

    def __init__(self, data_dir: Path, *extra: str, log_path: Path | None = None) -> None:
        self.proc = ServerProcess(data_dir, *extra)
        if log_path is not None:
            self.proc.log_path = log_path
        self.peak_rss_mb = 0.0
        self.kills = 0
        self._sampler: asyncio.Task[None] | None = None

    async def start(self) -> ChaosServer:
        await asyncio.to_thread(self.proc.start, 60.0)
        if self._sampler is None:
            self._sampler = asyncio.create_task(self._sample())
        return self

    async def _sample(self) -> None:
        while True:
            child = self.proc.proc
            if child is not None:
                self.peak_rss_mb = max(self.peak_rss_mb, vm_rss_mb(child.pid))
            await asyncio.sleep(0.1)

    async def sigkill_and_restart(self, meanwhile: Callable[[], object] | None = None) -> None:
        """SIGKILL, run ``meanwhile`` (say, damage the data dir as a lost disk cache would), start again."""
        self.proc.kill()
        self.kills += 1
        if meanwhile is not None:
            meanwhile()
        await self.start()

    async def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            self._sampler = None
        await asyncio.to_thread(self.proc.stop)


class SdkProducer:
    """The official RocketMQ 5.x Python SDK sending over gRPC from a subprocess (its protobuf types cannot
    share a process with tidemq.grpc's): it sends ``PREFIX-n`` until the stop file appears and prints one
    JSON line per send, which a reader thread turns into the tally."""

    def __init__(self, endpoint: str, topic: str, prefix: str, stop_file: Path, tally: Tally) -> None:
        self.stop_file = stop_file
        self.tally = tally
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "sdk_load_producer.py"), endpoint, topic, prefix, str(stop_file)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            if event["ok"]:
                self.tally.acknowledged.add(event["body"])
            else:
                self.tally.failed += 1

    def finish(self, timeout: float = 60.0) -> None:
        self.stop_file.touch()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(10)
