"""The loop-lag monitor (tidemq/loop_monitor.py) sees a stall, logs it once per interval, and keeps the
worst since start for nsqd's /stats and the broker's runtime info."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from tidemq.loop_monitor import LoopMonitor


async def test_an_artificial_stall_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    monitor = LoopMonitor(interval_s=0.01, warn_ms=100, warn_every_s=60)
    monitor.start()
    await asyncio.sleep(0.05)
    assert monitor.worst_ms < 100
    with caplog.at_level(logging.WARNING, logger="tidemq.loop_monitor"):
        time.sleep(0.3)  # holds the loop, as a request doing too much at once would
        await asyncio.sleep(0.05)
        time.sleep(0.15)  # a second stall within the warning interval: counted, not logged
        await asyncio.sleep(0.05)
    await monitor.close()
    assert monitor.worst_ms >= 250
    assert monitor.stalls == 2
    lines = [r.getMessage() for r in caplog.records if r.name == "tidemq.loop_monitor"]
    assert len(lines) == 1 and lines[0].startswith("event loop stalled 3"), lines
