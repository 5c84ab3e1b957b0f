"""What every client child process shares: the stamped bodies, the producing window and pace, the
consumer's tally of what arrived, and the one JSON line a child answers with.

A body is 16 bytes of (sequence number, ``time.time_ns()`` taken just before the send call) followed by
random padding up to ``BODY`` bytes, so every system carries the send timestamp the same way and the
consumer (another process, same wall clock) computes send -> receive latency on arrival.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import os
import struct
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from bench_common import Checklist, latency_ms

BODY = 1024
STAMP = struct.Struct("<QQ")
PAD = os.urandom(BODY - STAMP.size)
SETTLE_SECONDS = 30.0  # producer: how long unanswered sends may take after the loop ends


@dataclass
class Spec:
    """What the driver asks one client child to do (sent as JSON on its command line)."""

    system: str
    role: str  # "produce" or "consume"
    target: dict[str, Any]  # how to reach the broker (ports, addresses)
    name: str  # stream / queue / topic
    count: int
    cap: float  # seconds: the loop stops here even if the count is not reached
    variant: str = ""
    batch: int = 1  # messages per request
    window: int = 1  # requests unanswered at once
    rate: float = 0.0  # msg/s, 0 = as fast as possible
    group: str = ""  # consumer group / durable / channel
    groups: list[str] = field(default_factory=list)  # producer: groups to create before producing
    live: bool = False  # consumer: measure latency (the producer runs at the same time)
    drain: float = 10.0  # consumer: seconds to wait for the rest once the producer is done
    options: dict[str, Any] = field(default_factory=dict)


def stamped(seq: int) -> bytes:
    return STAMP.pack(seq, time.time_ns()) + PAD


def emit(result: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def ready() -> None:
    """Tells the driver the consumer is subscribed, so it may start the producer."""
    emit({"ready": True})


# --- producing -------------------------------------------------------------------------------------------


@dataclass
class Flow:
    """A producer's accounting: requests issued and answered, and the window of unanswered ones."""

    window: int
    issued: int = 0
    acked: int = 0
    failed: int = 0
    first_error: str | None = None
    capped: bool = False
    first_sent_ns: int = 0
    seconds: float = 0.0
    in_flight: int = 0

    def __post_init__(self) -> None:
        self._free: asyncio.Event | None = None
        self._started = 0.0

    def start(self) -> None:
        self._started = time.monotonic()
        self.first_sent_ns = time.time_ns()

    def stop(self) -> None:
        self.seconds = time.monotonic() - self._started

    def sent(self, n: int) -> None:
        self.issued += n
        self.in_flight += 1

    def settle(self, n: int, error: BaseException | str | None = None) -> None:
        """One request carrying ``n`` messages was answered (``error`` None: acknowledged)."""
        self.in_flight -= 1
        if error is None:
            self.acked += n
        else:
            self.failed += n
            self.first_error = self.first_error or (str(error) or type(error).__name__)
        if self._free is not None:
            self._free.set()

    def settle_future(self, n: int) -> Callable[[asyncio.Future[Any]], None]:
        def done(future: asyncio.Future[Any]) -> None:
            if future.cancelled():
                self.settle(n, "cancelled")
            else:
                self.settle(n, future.exception())

        return done

    async def below(self, limit: int) -> None:
        if self._free is None:
            self._free = asyncio.Event()
        while self.in_flight >= limit:
            self._free.clear()
            await self._free.wait()

    def result(self) -> dict[str, Any]:
        out = asdict(self)
        del out["in_flight"]
        return out


def _request_size(spec: Spec, start: float, seq: int) -> int:
    """Full speed: ``spec.batch``.  Paced: the messages due by now (at least one), at most ``spec.batch``,
    so a client that fell behind catches up with a small batch instead of drifting further."""
    n = spec.batch
    if spec.rate > 0:
        n = min(n, max(1, math.floor((time.monotonic() - start) * spec.rate) + 1 - seq))
    return min(n, spec.count - seq)


Send = Callable[[int, list[bytes]], Awaitable[None] | None]


async def pump(spec: Spec, send: Send, flow: Flow) -> Flow:
    """Issue ``spec.count`` messages as requests of ``spec.batch`` with at most ``spec.window`` unanswered,
    paced at ``spec.rate`` if set (by an absolute schedule: message ``seq`` is due ``seq / rate`` seconds
    after the start, so a late send does not shift the rest); ``send(n, bodies)`` issues one request and
    arranges ``flow.settle`` (a blocking client answers before returning, so its window is one)."""
    flow.start()
    start = time.monotonic()
    seq = 0
    while seq < spec.count:
        if spec.rate > 0 and (delay := start + seq / spec.rate - time.monotonic()) > 0:
            await asyncio.sleep(delay)
        if time.monotonic() - start >= spec.cap:
            flow.capped = True
            break
        await flow.below(spec.window)
        n = _request_size(spec, start, seq)
        bodies = [stamped(s) for s in range(seq, seq + n)]
        flow.sent(n)
        pending = send(n, bodies)
        if inspect.isawaitable(pending):
            await pending
        seq += n
    try:
        await asyncio.wait_for(flow.below(1), SETTLE_SECONDS)
    except TimeoutError:
        flow.first_error = flow.first_error or f"{flow.in_flight} requests unanswered after the loop"
    flow.stop()
    return flow


# --- consuming -------------------------------------------------------------------------------------------


class Tally(Checklist):
    """The consumer's record: distinct sequence numbers, duplicates and send -> receive latencies.

    It is done when every expected message arrived or its deadline passed.  The driver may lower the
    expectation on stdin (a line with the producer's acknowledged count) once the producer finished;
    from then on the consumer has ``spec.drain`` seconds for the rest.
    """

    def __init__(self, spec: Spec) -> None:
        super().__init__(spec.count)
        self.live = spec.live
        self.expected = spec.count
        self.first_ns = 0
        self.last_ns = 0
        self.end_ns = 0
        self.deadline = time.monotonic() + spec.cap + spec.drain
        self.drain = spec.drain
        threading.Thread(target=self._watch_stdin, daemon=True).start()

    def _watch_stdin(self) -> None:
        for line in sys.stdin:
            if line.strip().isdigit():
                self.expected = min(self.expected, int(line))
                self.deadline = min(self.deadline, time.monotonic() + self.drain)

    def record(self, body: bytes) -> None:
        now = time.time_ns()
        self.last_ns = now
        self.first_ns = self.first_ns or now
        try:
            seq, sent = STAMP.unpack_from(body)
        except struct.error:
            self.foreign += 1
            return
        self.check(seq, now - sent if self.live else None)

    def done(self) -> bool:
        return self.distinct >= self.expected or time.monotonic() >= self.deadline

    def finish(self) -> None:
        """After the last acknowledgement went out: the end of a drain's window."""
        self.end_ns = time.time_ns()

    def remaining(self, at_most: float) -> float:
        return max(0.001, min(at_most, self.deadline - time.monotonic()))

    async def wait(self, poll: float = 0.01) -> None:
        """For push-style consumers: until done."""
        while not self.done():
            await asyncio.sleep(poll)

    def result(self) -> dict[str, Any]:
        self.end_ns = self.end_ns or time.time_ns()
        p50, p99, top = latency_ms(self.latencies_ns)
        return {
            "distinct": self.distinct,
            "duplicates": self.duplicates,
            "foreign": self.foreign,
            "expected": self.expected,
            "first_ns": self.first_ns,
            "last_ns": self.last_ns,
            "end_ns": self.end_ns,
            "capped": self.distinct < self.expected,
            "p50_ms": p50,
            "p99_ms": p99,
            "max_ms": top,
        }
