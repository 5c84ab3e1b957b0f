"""The overview's TPS chart: the console samples the brokers' put/get totals itself (as rocketmq-dashboard
does), so the chart needs nothing the server does not already answer."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from tidemq.client.admin import Admin

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Sample:
    at: float
    put: int
    get: int
    commit_log_bytes: int


class TpsSampler:
    def __init__(self, admin: Callable[[], Admin], every: float, keep: int) -> None:
        """``admin`` names the client to ask each time: under ACL, a logged-in session's signed one."""
        self.admin = admin
        self.every = every
        self.samples: deque[Sample] = deque(maxlen=keep)

    async def sample(self) -> None:
        info = await self.admin().runtime_info()
        put = sum(int(t.get("msgPutTotalTodayNow") or 0) for t in info.values())
        get = sum(int(t.get("msgGetTotalTodayNow") or 0) for t in info.values())
        size = sum(
            int(t.get("commitLogMaxOffset") or 0) - int(t.get("commitLogMinOffset") or 0)
            for t in info.values()
        )
        self.samples.append(Sample(time.monotonic(), put, get, size))

    async def run(self) -> None:
        while True:
            try:
                await self.sample()
            except Exception as exc:  # a cluster that is down now shows as a gap, not a dead sampler
                log.warning("console: sampling the brokers failed: %s", exc)
            await asyncio.sleep(self.every)

    def rates(self) -> dict[str, list[float]]:
        """Messages per second in and out between consecutive samples."""
        pairs = list(zip(self.samples, list(self.samples)[1:], strict=False))
        ins, outs = [], []
        for a, b in pairs:
            span = max(1e-3, b.at - a.at)
            ins.append(max(0, b.put - a.put) / span)
            outs.append(max(0, b.get - a.get) / span)
        return {"TPS in": ins, "TPS out": outs}
