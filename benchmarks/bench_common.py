"""What every benchmark here shares: the server child process, machine facts, and row reporting."""

from __future__ import annotations

import argparse
import asyncio
import collections
import logging
import math
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

HOST = "127.0.0.1"
CLK_TCK = os.sysconf("SC_CLK_TCK")
MIB = 1024 * 1024
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def proc_stat(pid: int) -> list[str]:
    """``/proc/PID/stat`` from field 3 (state) onward, so proc(5) field N is at index N - 3."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2 :].split()


def log_tail(path: Path, chars: int) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


async def wait_until(predicate: Callable[[], object], timeout: float, poll: float = 0.02) -> bool:
    """Poll ``predicate`` until it is truthy (True) or ``timeout`` seconds passed (False)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(poll)
    return True


class Server:
    """One ``tidemq`` server child process with its own temp data dir, stopped by its PID.

    This one runs ``tidemq server`` with only its RocketMQ side; subclasses change ``command``.
    """

    name = "server"
    #: Python options before ``-m tidemq`` (e.g. ``-m cProfile -o FILE`` to profile the server).
    interpreter_args: list[str] = []

    def __init__(self, flush: str) -> None:
        self.flush = flush
        self.workdir = Path(tempfile.mkdtemp(prefix=f"tidemq-bench-{flush}-"))
        self.data_dir = self.workdir / "data"
        self.log_path = self.workdir / "server.log"
        self.namesrv_port = free_port()
        self.broker_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def namesrv(self) -> str:
        """The name server address a RocketMQ client is given."""
        return f"{HOST}:{self.namesrv_port}"

    def command(self) -> list[str]:
        return [
            "server", "--listen", HOST,
            "--namesrv-port", str(self.namesrv_port),
            "--broker-port", str(self.broker_port),
            "--no-nsq", "--no-lookupd", "--no-grpc", "--no-http",
        ]  # fmt: skip

    def start(self, timeout: float = 30.0) -> None:
        args = [sys.executable, *self.interpreter_args, "-m", "tidemq", *self.command()]
        args += ["--data-dir", str(self.data_dir)]
        args += ["--flush", self.flush]
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
        raise RuntimeError(f"{self.name} ({self.flush}) did not start: {self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        return log_tail(self.log_path, chars)

    def cpu_seconds(self) -> float:
        """utime + stime of the whole server process (all threads), in seconds."""
        fields = proc_stat(self.pid)
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of proc(5)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, then SIGKILL if it does not exit in time; returns the exit code."""
        code: int | None = None
        if self.proc is not None:
            if self.proc.poll() is None:
                os.kill(self.proc.pid, signal.SIGTERM)
            try:
                code = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                code = self.proc.wait(10)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self.proc = None
        return code

    def cleanup(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


class Meter:
    """CPU seconds of the server process and of this process, and wall seconds, since it was made."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.server0, self.client0, self.wall0 = server.cpu_seconds(), time.process_time(), time.monotonic()

    def read(self) -> tuple[float, float, float]:
        """(server CPU, this process's CPU, wall time)."""
        return (
            self.server.cpu_seconds() - self.server0,
            time.process_time() - self.client0,
            time.monotonic() - self.wall0,
        )


S = TypeVar("S", bound=Server)


def with_server(server: S, run: Callable[[S], T]) -> T:
    """Start ``server``, run the workloads against it, and always stop it, showing its log on trouble."""
    label = f"{server.name} ({server.flush} flush)"
    try:
        server.start()
        print(f"{label} pid {server.pid}, data dir {server.data_dir}", file=sys.stderr)
        return run(server)
    except Exception:
        print(f"{label} log tail:\n{server.log_tail()}", file=sys.stderr)
        raise
    finally:
        code = server.stop()
        if code not in (0, None):
            print(f"{label} exited with {code}; log tail:\n{server.log_tail()}", file=sys.stderr)
        server.cleanup()


# --- machine ---------------------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> str:
    return (
        f"Machine: {os.cpu_count()} cores, {cpu_model()}, "
        f"Python {platform.python_version()} ({platform.python_implementation()}), {platform.system()} "
        f"{platform.release()}; data dir under {tempfile.gettempdir()}"
    )


# --- rows and reports ---------------------------------------------------------------------------------


class ReportedRow(Protocol):
    workload: str
    messages: int
    seconds: float
    p50_ms: float | None
    p99_ms: float | None
    notes: list[str]
    error: str | None


def fmt_size(n: int) -> str:
    return f"{n // 1024} KiB" if n % 1024 == 0 else f"{n} B"


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def percentile_ms(sorted_ns: list[int], p: float) -> float | None:
    if not sorted_ns:
        return None
    return sorted_ns[max(0, math.ceil(p * len(sorted_ns)) - 1)] / 1e6


def latency_ms(latencies_ns: list[int]) -> tuple[float | None, float | None, float | None]:
    """(p50, p99, max) in milliseconds; all None without samples."""
    ordered = sorted(latencies_ns)
    top = ordered[-1] / 1e6 if ordered else None
    return percentile_ms(ordered, 0.50), percentile_ms(ordered, 0.99), top


class Checklist:
    """The sequence numbers a consumer received: each counted once, with its send -> receive latency;
    a repeat counts as a duplicate, a number outside ``0 .. capacity - 1`` as foreign."""

    def __init__(self, capacity: int) -> None:
        self.seen = bytearray(capacity)
        self.distinct = 0
        self.duplicates = 0
        self.foreign = 0
        self.latencies_ns: list[int] = []

    def check(self, seq: int, latency_ns: int | None) -> bool:
        """Count one delivery; True if ``seq`` is new (its latency is kept unless None)."""
        if not 0 <= seq < len(self.seen):
            self.foreign += 1
            return False
        if self.seen[seq]:
            self.duplicates += 1
            return False
        self.seen[seq] = 1
        self.distinct += 1
        if latency_ns is not None:
            self.latencies_ns.append(latency_ns)
        return True


def rate(row: ReportedRow) -> float:
    return row.messages / row.seconds if row.seconds > 0 else 0.0


def report(row: ReportedRow, digits: int = 1) -> None:
    """One progress line per finished row, on stderr (the tables go to stdout)."""
    if row.error:
        print(f"  {row.workload}: FAILED: {row.error}", file=sys.stderr)
        return
    latency = ""
    if row.p50_ms is not None and row.p99_ms is not None:
        latency = f", p50 {row.p50_ms:.{digits}f} ms, p99 {row.p99_ms:.{digits}f} ms"
    notes = f" [{'; '.join(row.notes)}]" if row.notes else ""
    summary = f"{row.messages:,} msgs in {row.seconds:.2f} s, {rate(row):,.0f} msg/s"
    print(f"  {row.workload}: {summary}{latency}{notes}", file=sys.stderr)


class WarningCounter(logging.Handler):
    """Counts the warnings tidemq logs (they also reach stderr through the root handler)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: collections.Counter[str] = collections.Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[record.name] += 1

    def summary(self) -> str:
        return "Client warnings logged: " + ", ".join(f"{k} x{n}" for k, n in self.counts.items())


def arg_parser(
    doc: str | None, quick_help: str = "small budgets and short time caps (smoke run)"
) -> argparse.ArgumentParser:
    """The benchmark's usage from its docstring, and the ``--quick`` flag they all have."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    return parser


def md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"
