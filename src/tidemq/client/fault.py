"""Send-latency fault avoidance (Java MQFaultStrategy): a broker that answered slowly or failed is skipped
for a while, longer the worse it did."""

from __future__ import annotations

import time
from dataclasses import dataclass

# latency upper bounds (ms) -> how long the broker is avoided (ms), as in Java's MQFaultStrategy
LATENCY_MAX = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_DURATION = (0, 0, 30000, 60000, 120000, 180000, 600000)
ISOLATION_LATENCY_MS = 30000


@dataclass(slots=True)
class _FaultItem:
    latency_ms: float
    available_at: float


class LatencyFaultTolerance:
    def __init__(self) -> None:
        self._items: dict[str, _FaultItem] = {}

    def update(self, broker_name: str, latency_ms: float, isolation: bool) -> None:
        latency = ISOLATION_LATENCY_MS if isolation else latency_ms
        duration = 0
        for bound, avoid in zip(reversed(LATENCY_MAX), reversed(NOT_AVAILABLE_DURATION), strict=True):
            if latency >= bound:
                duration = avoid
                break
        self._items[broker_name] = _FaultItem(latency, time.monotonic() + duration / 1000)

    def available(self, broker_name: str) -> bool:
        item = self._items.get(broker_name)
        return item is None or time.monotonic() >= item.available_at
