"""The chaos suite's shared parts: a server that can be SIGKILLed and restarted on the same data dir and
ports, a peak-RSS sampler reading /proc, the acknowledged/consumed accounting, and the report rows the
conftest prints (and, for the long run, writes into docs/reliability.md)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import struct
import subprocess
import sys
import threading
import time
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


def vm_rss_mb(pid: int, field: str = "VmRSS") -> float:
    """``VmRSS`` (or another field, say ``RssAnon``: VmRSS less the mapped commit log's pages and other
    files) of /proc/<pid>/status, in MB."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
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


# --- the abuse cases' canary (tests/chaos/test_abuse.py, tests/server/test_loop_canary.py) ---------------

#: The issue's bound on the canary's worst gap between two finished rounds.
STALL_BOUND_MS = 200.0


async def canary_rounds(
    server: ServerProcess,
    rocket_topic: str,
    stop: asyncio.Event,
    on_round: Callable[[float, float, bytes], None] | None = None,
) -> list[float]:
    """Rounds of: NSQ PUB, its delivery to a subscriber (FINed), a RocketMQ send to queue 0 of
    ``rocket_topic``; the gaps between finished rounds (a stall anywhere in the server shows as one long
    gap). ``on_round(finished_at, gap, body)`` hears of each round once both messages were acknowledged."""
    from tests.nsq_support import RawNsq
    from tests.support import RawClient, unique
    from tidemq.remoting.codes import ResponseCode

    topic = unique("canary")
    publisher, subscriber = await RawNsq.open(server.nsqd), await RawNsq.open(server.nsqd)
    await subscriber.sub(topic, "c", rdy=10)
    rocket = await RawClient.open(server.broker)
    gaps: list[float] = []
    last = time.monotonic()
    n = 0
    try:
        while not stop.is_set():
            body = b"canary %d" % n
            assert await publisher.pub(topic, body) == b"OK"
            msg = await subscriber.message(30)
            assert msg.body == body, (msg.body, body)
            subscriber.send("FIN", msg.id)
            assert (await rocket.send(rocket_topic, body)).code == ResponseCode.SUCCESS
            now = time.monotonic()
            gaps.append(now - last)
            if on_round is not None:
                on_round(now, now - last, body)
            last, n = now, n + 1
            await asyncio.sleep(0.005)
    finally:
        publisher.close()
        subscriber.close()
        rocket.close()
    return gaps


class ThreadedCanary:
    """:func:`canary_rounds` on its own thread and event loop, so it runs through every abuse case of a
    module (each case a test of its own), and a sampler of the server's VmRSS every 100 ms beside it."""

    def __init__(self, server: ServerProcess, rocket_topic: str) -> None:
        self.server = server
        self.rocket_topic = rocket_topic
        self.rounds: list[tuple[float, float, bytes]] = []
        #: (when, VmRSS, RssAnon) every 100 ms.
        self.rss: list[tuple[float, float, float]] = []
        self.error: BaseException | None = None
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="canary", daemon=True)

    def start(self) -> ThreadedCanary:
        self._thread.start()
        self._ready.wait(30)
        return self

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        sampler = asyncio.create_task(self._sample())
        self._ready.set()
        try:
            await canary_rounds(self.server, self.rocket_topic, self._stop, self._record)
        except BaseException as exc:  # reported by the case that sees it
            self.error = exc
        finally:
            sampler.cancel()

    def _record(self, at: float, gap: float, body: bytes) -> None:
        self.rounds.append((at, gap, body))

    async def _sample(self) -> None:
        while True:
            child = self.server.proc
            if child is not None:
                pid = child.pid
                self.rss.append((time.monotonic(), vm_rss_mb(pid), vm_rss_mb(pid, "RssAnon")))
            await asyncio.sleep(0.1)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)

    def window(
        self, start: float, end: float
    ) -> tuple[list[tuple[float, float, bytes]], float, float, float]:
        """The rounds finished in [start, end], the worst gap among them (or the time since the last round
        if the canary stands still), and the peak VmRSS and RssAnon sampled meanwhile."""
        rounds = [r for r in self.rounds if start <= r[0] <= end]
        last = self.rounds[-1][0] if self.rounds else start
        worst = max([gap for _, gap, _ in rounds] + [end - max(last, start)])
        samples = [(rss, anon) for at, rss, anon in self.rss if start <= at <= end] or [(0.0, 0.0)]
        return rounds, worst, max(s[0] for s in samples), max(s[1] for s in samples)


async def count_nsq_messages(
    addr: str, topic: str, channel: str, expected: int, timeout: float, *, keep: bool = False
) -> tuple[int, list[bytes]]:
    """Subscribe and FIN until ``expected`` messages came or nothing came for 5 s (or ``timeout``): how many
    (and, with ``keep``, their bodies). Frames are parsed in bulk and FINs written in batches, so a
    million tiny messages take seconds, not minutes."""
    from tidemq.nsq.protocol import MAGIC_V2

    host, port = addr.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(MAGIC_V2 + f"SUB {topic} {channel}\nRDY 2500\n".encode())
    buffer, count, bodies = bytearray(), 0, []
    deadline = time.monotonic() + timeout
    try:
        while count < expected and time.monotonic() < deadline:
            try:
                chunk = await asyncio.wait_for(reader.read(1 << 20), 5.0)
            except TimeoutError:
                break
            if not chunk:
                break
            buffer += chunk
            fins, pos = [], 0
            while len(buffer) - pos >= 8:
                size, ftype = struct.unpack_from(">ii", buffer, pos)
                if len(buffer) - pos < 4 + size:
                    break
                if ftype == 2:  # a message: timestamp 8, attempts 2, id 16, body
                    fins.append(b"FIN " + bytes(buffer[pos + 18 : pos + 34]) + b"\n")
                    count += 1
                    if keep:
                        bodies.append(bytes(buffer[pos + 34 : pos + 4 + size]))
                elif ftype == 0 and buffer[pos + 8 : pos + 4 + size] == b"_heartbeat_":
                    fins.append(b"NOP\n")
                elif ftype == 1:
                    raise AssertionError(f"nsqd error: {bytes(buffer[pos + 8 : pos + 4 + size])!r}")
                pos += 4 + size
            del buffer[:pos]
            writer.write(b"".join(fins))
    finally:
        writer.close()
    return count, bodies
