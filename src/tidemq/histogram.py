"""Latency histograms cheap enough for the send, pull and flush paths.

A hot path pays one ``bisect`` and two additions per observation; nothing is formatted or locked until a
scrape reads the buckets (``/metrics`` on the operations port). The buckets are fixed: the Prometheus
histogram's cumulative ``le`` buckets are summed from them at scrape time.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar, cast

#: Upper bounds in seconds, from 100 microseconds (an in-memory send) to 10 seconds (a stalled fsync).
LATENCY_BUCKETS_S = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

P = ParamSpec("P")
R = TypeVar("R")


class LatencyHistogram:
    """Counts per bucket (the last one is +Inf) and the sum of what was observed."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS_S) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.total += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, float]]:
        """``(le, count)`` pairs as Prometheus wants them: cumulative, ending with ``+Inf``."""
        out = []
        running = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += n
            out.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
        return out


def timed(histogram: LatencyHistogram, func: Callable[P, R | Awaitable[R]]) -> Callable[P, R | Awaitable[R]]:
    """``func`` observed in ``histogram``: a plain answer when it returns, an awaitable one when it
    resolves (a send under sync flush is answered once the fsync covers it)."""
    clock = time.perf_counter

    def call(*args: P.args, **kwargs: P.kwargs) -> R | Awaitable[R]:
        started = clock()
        result = func(*args, **kwargs)
        if isinstance(result, asyncio.Future):  # an answer to come, resolved without a task of its own
            result.add_done_callback(lambda _: histogram.observe(clock() - started))
            return result
        if getattr(result, "__await__", None) is not None:  # isawaitable's ABC check costs 10x, per message
            return _finish(histogram, cast(Awaitable[R], result), started)
        histogram.observe(clock() - started)
        return result

    return call


async def _finish(histogram: LatencyHistogram, result: Awaitable[R], started: float) -> R:
    try:
        return await result
    finally:
        histogram.observe(time.perf_counter() - started)
