"""End-to-end processing latency quantiles, as nsqd's ``--e2e-processing-latency-percentile`` reports them.

nsqd keeps, per channel, a summary of the time from each message's timestamp to its FIN over a sliding
window (two half-windows: the older is dropped each half window), and answers ``/stats`` with the
requested quantiles of both halves merged; a topic reports its channels merged. The summary is the
targeted-quantile stream of Cormode, Korn, Muthukrishnan and Srivastava ("Effective computation of biased
quantiles over data streams", 2005) with a rank error of 1%: memory stays small however many messages a
window holds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

#: The largest rank error a target may have (a fraction of the count); a target q also gets at most a tenth
#: of its tail, 1 - q, so a p99 is off by at most 0.1% of the count, not 1% (which could be the maximum).
EPSILON = 0.01
#: Latencies gathered before they are merged into the summary (a merge sorts them once).
BUFFER = 500

#: One summary entry: (value, width g, delta): the value's rank lies in [r + g, r + g + delta], r the
#: widths before it.
Entry = tuple[float, float, float]


class TargetedStream:
    """A CKMS summary that keeps ``targets`` (quantiles in (0, 1]) accurate to within EPSILON of rank."""

    __slots__ = ("_buffer", "_summary", "count", "targets")

    def __init__(self, targets: Sequence[float]) -> None:
        self.targets = tuple((q, min(EPSILON, (1 - q) / 10)) for q in targets)
        self.count = 0.0  # observations merged into the summary
        self._summary: list[Entry] = []
        self._buffer: list[float] = []

    def insert_many(self, values: Iterable[float]) -> None:
        self._buffer.extend(values)
        if len(self._buffer) >= BUFFER:
            self._flush()

    def _allowed(self, rank: float) -> float:
        """How much uncertainty (g + delta) an entry at ``rank`` may carry and keep every target's error."""
        n = self.count
        best = math.inf
        for q, epsilon in self.targets:
            if q * n <= rank:
                allowed = 2 * epsilon * rank / q
            elif q < 1:
                allowed = 2 * epsilon * (n - rank) / (1 - q)
            else:
                continue
            best = min(best, allowed)
        return min(best, n)  # only a 1.0 target (the maximum, always kept exactly) leaves it unbounded

    def _flush(self) -> None:
        if self._buffer:
            values, self._buffer = sorted(self._buffer), []
            self.merge([(v, 1.0, 0.0) for v in values])

    def merge(self, entries: Sequence[Entry]) -> None:
        """Merge sorted entries (raw observations, or another summary's entries) into this summary."""
        summary = self._summary
        merged: list[Entry] = []
        rank = 0.0
        i = 0
        for value, width, delta in entries:
            while i < len(summary) and summary[i][0] <= value:
                merged.append(summary[i])
                rank += summary[i][1]
                i += 1
            if i < len(summary):  # in the middle: its rank is as uncertain as the invariant allows there
                delta = max(delta, math.floor(self._allowed(rank)) - 1)
            merged.append((value, width, delta))
            self.count += width
            rank += width
        merged += summary[i:]
        self._summary = self._compress(merged)

    def _compress(self, entries: list[Entry]) -> list[Entry]:
        """Fold each entry into its right neighbour while the neighbour's uncertainty stays allowed."""
        if len(entries) < 2:
            return entries
        kept: list[Entry] = []  # right to left
        value, width, delta = entries[-1]
        rank = self.count - 1 - width
        for left in reversed(entries[:-1]):
            if left[1] + width + delta <= self._allowed(rank):
                width += left[1]
            else:
                kept.append((value, width, delta))
                value, width, delta = left
            rank -= left[1]
        kept.append((value, width, delta))
        kept.reverse()
        return kept

    def entries(self) -> list[Entry]:
        """What another summary merges in: this one's entries (the buffer merged first)."""
        self._flush()
        return list(self._summary)

    def total(self) -> int:
        return int(self.count) + len(self._buffer)

    def query(self, q: float) -> float:
        self._flush()
        summary = self._summary
        if not summary:
            return 0.0
        target = math.ceil(q * self.count)
        target += math.ceil(self._allowed(target) / 2)
        previous = summary[0]
        rank = 0.0
        for entry in summary[1:]:
            rank += previous[1]
            if rank + entry[1] + entry[2] > target:
                return previous[0]
            previous = entry
        return previous[0]

    def reset(self) -> None:
        self.count = 0.0
        self._summary = []
        self._buffer = []


@dataclass(frozen=True, slots=True)
class LatencySettings:
    """``--e2e-processing-latency-percentile`` values and ``--e2e-processing-latency-window-time``."""

    percentiles: tuple[float, ...]
    window_s: float = 600.0


class E2eLatency:
    """A channel's processing latencies (ns) over the last window: two summaries of half a window each,
    the current one taking new latencies; when half a window has passed, the older is emptied and takes
    over. A query sees both, so it covers between half and all of the window, as nsqd's does."""

    __slots__ = ("_current", "_moved_at", "_streams", "half_window_s", "settings")

    def __init__(self, settings: LatencySettings) -> None:
        self.settings = settings
        self.half_window_s = settings.window_s / 2
        self._streams = (TargetedStream(settings.percentiles), TargetedStream(settings.percentiles))
        self._current = 0
        self._moved_at = time.monotonic()

    def _advance(self) -> None:
        now = time.monotonic()
        if now - self._moved_at <= self.half_window_s:
            return
        if now - self._moved_at > 2 * self.half_window_s:  # idle for a whole window: both are stale
            for stream in self._streams:
                stream.reset()
            self._moved_at = now
            return
        while now - self._moved_at > self.half_window_s:
            self._current ^= 1
            self._moved_at += self.half_window_s
            self._streams[self._current].reset()

    def record(self, latencies_ns: Iterable[float]) -> None:
        self._advance()
        self._streams[self._current].insert_many(latencies_ns)

    def entries(self) -> list[Entry]:
        self._advance()
        return self._streams[0].entries() + self._streams[1].entries()


def latency_result(settings: LatencySettings, sources: Iterable[E2eLatency]) -> dict[str, Any]:
    """nsqd's ``e2e_processing_latency`` object for the merged latencies of ``sources``."""
    merged = TargetedStream(settings.percentiles)
    merged.merge(sorted(entry for source in sources for entry in source.entries()))
    return {
        "count": merged.total(),
        "percentiles": [{"quantile": q, "value": merged.query(q)} for q in settings.percentiles],
    }


def human_ns(value: float) -> str:
    """A latency in ns the way nsqd's text /stats prints it: one decimal, in s, ms, us or ns."""
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if value > scale:
            return f"{value / scale:.1f}{unit}"
    return f"{value:.1f}ns"
