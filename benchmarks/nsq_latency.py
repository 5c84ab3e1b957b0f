"""NSQ request latency: one synchronous PUB at a time, the real nsqd 1.3.0 against ``tidemq nsqd``.

The same client drives each server: the pinned go-nsq 1.1.0 harness (interop/nsq-go, ``nsqgo bench-pub``:
``--count`` synchronous ``producer.Publish`` calls of ``--body-size``-byte bodies, one in flight, after
200 untimed ones) and, for reference, tidemq's own asyncio NSQ ``Producer`` (``await publish``, in this
process). Each round runs every client against every server, in the same order, so a slow stretch of a
shared machine falls on all of them: real nsqd, tidemq async flush, the same on uvloop (``--event-loop
uvloop``), tidemq sync flush, then the next round. Each run publishes to a fresh topic; sync flush runs
publish a tenth as many (each PUB waits for its fsync). The table shows the medians over ``--repeat``
rounds (3) of msg/s and of p50/p99 round trip, and each server's median msg/s over the real nsqd's.

The servers: ``.cache/nsq/bin/nsqd`` (``make nsq-go``) with ``--data-path`` in a temp dir and its
defaults (an in-memory queue of 10,000 messages per topic before it writes to disk), and once more
with ``--mem-queue-size=0`` (every message goes through its disk queue, which fsyncs every 2,500
messages or 2 s: the nearest it has to tidemq's store), and ``python -m tidemq
nsqd --flush async|sync`` (``Nsqd`` in nsq_workloads.py); all on free 127.0.0.1 ports, stopped by PID.
The go harness is built into ``var/nsq-go-bin`` from this checkout's interop/nsq-go when missing
(``--nsqgo PATH`` uses another build).

``--profile PATH`` instead runs one ``tidemq nsqd`` (async flush) under cProfile (``TIDEMQ_PROFILE``),
sends it ``--count`` go-nsq PUBs, stops it and prints the top of the profile (stats kept in PATH).

Usage: ``PYTHONPATH=src .venv/bin/python benchmarks/nsq_latency.py [--quick] [--repeat 3] [--count N]``
"""

from __future__ import annotations

import asyncio
import json
import os
import pstats
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench_common import HOST, arg_parser, free_port, machine, md_row
from nsq_workloads import Nsqd, pub_sequential
from tidemq.nsq.client import Producer

ROOT = Path(__file__).resolve().parent.parent
REAL_NSQD = ROOT / ".cache" / "nsq" / "bin" / "nsqd"
NSQGO = ROOT / "var" / "nsq-go-bin" / "nsqgo"
GO_CACHE = ROOT / ".cache" / "go"
RUN_TIMEOUT = 120.0


class RealNsqd:
    """nsqd 1.3.0 as a child process with its own temp data dir, stopped by its PID."""

    def __init__(self, mem_queue_size: int | None = None) -> None:
        self.mem_queue_size = mem_queue_size
        self.name = "real nsqd 1.3.0"
        if mem_queue_size is not None:
            self.name += f" --mem-queue-size={mem_queue_size}"
        self.workdir = Path(tempfile.mkdtemp(prefix="nsqd-real-"))
        self.tcp_port = free_port()
        self.http_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def tcp(self) -> str:
        return f"{HOST}:{self.tcp_port}"

    def start(self, timeout: float = 20.0) -> None:
        args = [str(REAL_NSQD), f"--tcp-address={self.tcp}", f"--http-address={HOST}:{self.http_port}"]
        args.append(f"--data-path={self.workdir}")
        if self.mem_queue_size is not None:
            args.append(f"--mem-queue-size={self.mem_queue_size}")
        with open(self.workdir / "nsqd.log", "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                socket.create_connection((HOST, self.tcp_port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"real nsqd did not start: {(self.workdir / 'nsqd.log').read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
            self.proc = None
        shutil.rmtree(self.workdir, ignore_errors=True)


@dataclass
class Target:
    label: str
    address: str
    #: Timed PUBs per run: a sync flush PUB waits for its fsync, so those runs get a tenth.
    count: int
    runs: dict[str, list[tuple[float, float, float]]] = field(default_factory=dict)


def build_nsqgo() -> None:
    """``go build`` of this checkout's interop/nsq-go (modules from the shared cache, as ``make nsq-go``)."""
    NSQGO.parent.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "GOPATH": str(GO_CACHE),
        "GOMODCACHE": str(GO_CACHE / "mod"),
        "GOCACHE": str(GO_CACHE / "build"),
        "GOFLAGS": "-mod=readonly -modcacherw",
    }
    build = ["go", "build", "-o", str(NSQGO.parent) + "/", "."]
    subprocess.run(build, cwd=ROOT / "interop" / "nsq-go", env=env, check=True)


def go_pub(nsqgo: Path, address: str, topic: str, count: int, body_size: int) -> tuple[float, float, float]:
    """(msg/s, p50 us, p99 us) of ``nsqgo bench-pub``."""
    args = [str(nsqgo), "bench-pub", "--nsqd-tcp-address", address, "--topic", topic]
    args += ["--count", str(count), "--body-size", str(body_size), "--timeout", str(RUN_TIMEOUT)]
    done = subprocess.run(args, capture_output=True, timeout=RUN_TIMEOUT + 10)
    if done.returncode != 0:
        problem = done.stderr[-800:].decode(errors="replace")
        raise RuntimeError(f"nsqgo bench-pub against {address} exited {done.returncode}: {problem}")
    doc = json.loads(done.stdout.splitlines()[-1])
    return float(doc["msgs_per_s"]), float(doc["p50_us"]), float(doc["p99_us"])


def py_pub(address: str, topic: str, count: int, body_size: int) -> tuple[float, float, float]:
    """(msg/s, p50 us, p99 us) of tidemq's Producer, ``await publish`` one at a time, in this process."""

    async def run() -> tuple[float, float, float]:
        producer = Producer(address)
        await producer.ping()
        try:
            body = b"x" * body_size
            await pub_sequential(producer, topic, body, 200, RUN_TIMEOUT)  # warm-up, as the go harness does
            done = await pub_sequential(producer, topic, body, count, RUN_TIMEOUT)
        finally:
            await producer.stop()
        if done.failed:
            raise RuntimeError(f"{done.failed} PUBs failed: {done.first_error}")
        lat = sorted(done.latencies_ns)
        return done.acked / done.seconds, lat[len(lat) // 2] / 1e3, lat[int(0.99 * (len(lat) - 1))] / 1e3

    return asyncio.run(run())


def table(targets: list[Target], clients: list[str]) -> None:
    base = targets[0]
    print(md_row(["client", "server", "msg/s (median)", "vs real nsqd", "p50 us", "p99 us", "runs msg/s"]))
    print(md_row(["---"] * 2 + ["---:"] * 4 + ["---"]))
    for client in clients:
        real = statistics.median(r[0] for r in base.runs[client])
        for target in targets:
            runs = target.runs[client]
            rate = statistics.median(r[0] for r in runs)
            print(
                md_row([
                    client, target.label, f"{rate:,.0f}", f"{rate / real:.2f}x",
                    f"{statistics.median(r[1] for r in runs):.0f}",
                    f"{statistics.median(r[2] for r in runs):.0f}",
                    ", ".join(f"{r[0]:,.0f}" for r in runs),
                ])
            )  # fmt: skip


def start_tidemq(server: Nsqd, src: Path | None) -> None:
    """Start it with ``src`` first on PYTHONPATH (another checkout: the base of a before/after run)."""
    saved = os.environ.get("PYTHONPATH")
    if src is not None:
        os.environ["PYTHONPATH"] = str(src)
    try:
        server.start()
    finally:
        if src is not None:
            if saved is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = saved


def compare(nsqgo: Path, count: int, body_size: int, repeat: int, python: bool, base: Path | None) -> None:
    reals = [RealNsqd(), RealNsqd(mem_queue_size=0)]
    # async flush on asyncio's loop, then on uvloop's (``--event-loop uvloop``), then sync flush
    kinds = [("async", "asyncio"), ("async", "uvloop"), ("sync", "asyncio")]
    tidemq: dict[tuple[str, str, Path | None], Nsqd] = {}
    for flush, loop in kinds:
        tidemq[(flush, loop, None)] = Nsqd(flush, loop)
        if base is not None and loop == "asyncio":  # the base after this checkout's server: they alternate
            tidemq[(flush, loop, base)] = Nsqd(flush)
    clients = ["go-nsq 1.1.0"] + (["tidemq Producer"] if python else [])
    try:
        for real in reals:
            real.start()
        for (_, _, src), server in tidemq.items():
            start_tidemq(server, src)
        targets = [Target(real.name, real.tcp, count) for real in reals]
        targets += [
            Target(
                f"tidemq nsqd, {flush} flush" + (", uvloop" if loop == "uvloop" else "")
                + (f" (base {src})" if src else ""),
                s.tcp,
                count if flush == "async" else max(500, count // 10),
            )
            for (flush, loop, src), s in tidemq.items()
        ]  # fmt: skip
        for round_no in range(repeat):
            for client in clients:
                for target in targets:
                    topic = f"lat_{round_no}_{int(time.time() * 1000) % 10**9}"
                    if client.startswith("go"):
                        result = go_pub(nsqgo, target.address, topic, target.count, body_size)
                    else:
                        result = py_pub(target.address, topic, target.count, body_size)
                    target.runs.setdefault(client, []).append(result)
                    line = f"round {round_no + 1} {client} -> {target.label}: {result[0]:,.0f} msg/s"
                    print(line, file=sys.stderr)
    finally:
        for real in reals:
            real.stop()
        for server in tidemq.values():
            server.stop()
            server.cleanup()
    print(machine())
    print(f"{count:,} synchronous PUBs of {body_size} B per run (sync flush: {max(500, count // 10):,}), "
          f"medians of {repeat} alternating rounds\n")  # fmt: skip
    table(targets, clients)


def profile(nsqgo: Path, count: int, body_size: int, path: Path, event_loop: str) -> None:
    server = Nsqd("async", event_loop)
    os.environ["TIDEMQ_PROFILE"] = str(path)
    try:
        server.start()
        result = go_pub(nsqgo, server.tcp, "profiled", count, body_size)
        print(f"go-nsq bench-pub under cProfile: {result[0]:,.0f} msg/s (profiling slows the server)")
    finally:
        del os.environ["TIDEMQ_PROFILE"]
        server.stop()
        server.cleanup()
    pstats.Stats(str(path)).sort_stats("tottime").print_stats(30)


def main() -> None:
    parser = arg_parser(__doc__)
    parser.add_argument("--count", type=int, default=None, help="timed PUBs per run (20,000; 5,000 quick)")
    parser.add_argument("--body-size", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3, help="alternating rounds (medians over them)")
    parser.add_argument("--no-python", action="store_true", help="only the go-nsq client")
    parser.add_argument("--nsqgo", type=Path, default=None, help="a built nsqgo (default: builds one)")
    parser.add_argument("--profile", type=Path, default=None, help="cProfile tidemq nsqd into this file")
    parser.add_argument("--base-src", type=Path, default=None, help="tidemq from this src too")
    parser.add_argument("--event-loop", default="asyncio", help="the profiled server's (asyncio, uvloop)")
    args = parser.parse_args()
    count = args.count or (5_000 if args.quick else 20_000)
    nsqgo = args.nsqgo
    if nsqgo is None:
        build_nsqgo()
        nsqgo = NSQGO
    if args.profile is not None:
        profile(nsqgo, count, args.body_size, args.profile, args.event_loop)
        return
    if not REAL_NSQD.exists():
        sys.exit(f"{REAL_NSQD} is missing: run `make nsq-go` first")
    compare(nsqgo, count, args.body_size, args.repeat, not args.no_python, args.base_src)


if __name__ == "__main__":
    main()
