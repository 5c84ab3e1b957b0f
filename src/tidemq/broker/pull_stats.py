"""How many messages each group pulled from each topic over the last minute: the ``consumeTps`` of
GET_CONSUME_STATS (a Java broker's GROUP_GET_NUMS statistic), which consoles and mqadmin show."""

from __future__ import annotations

import time
from collections.abc import Callable

BUCKET_S = 10
WINDOW_BUCKETS = 6  # one minute


class PulledPerMinute:
    """Counts in 10-second buckets; a rate is the last minute's count over a minute."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[tuple[str, str], dict[int, int]] = {}

    def record(self, topic: str, group: str, count: int) -> None:
        bucket = int(self._clock() // BUCKET_S)
        per = self._buckets.get((topic, group))
        if per is None:
            per = self._buckets[(topic, group)] = {}
        per[bucket] = per.get(bucket, 0) + count
        if len(per) > WINDOW_BUCKETS:
            for old in [b for b in per if b <= bucket - WINDOW_BUCKETS]:
                del per[old]

    def tps(self, topic: str, group: str) -> float:
        """Messages per second pulled by ``group`` from ``topic`` over the last minute."""
        per = self._buckets.get((topic, group))
        if not per:
            return 0.0
        now = int(self._clock() // BUCKET_S)
        return sum(n for b, n in per.items() if b > now - WINDOW_BUCKETS) / (BUCKET_S * WINDOW_BUCKETS)

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self._buckets if k[0] == topic]:
            del self._buckets[key]
