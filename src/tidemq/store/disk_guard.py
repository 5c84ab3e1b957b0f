"""Disk pressure refuses new writes; it never deletes data.

RocketMQ marks its store disk-full once the disk is more than ``diskSpaceWarningLevelRatio`` (0.90) used
and refuses sends with SERVICE_NOT_AVAILABLE until use falls below ``diskSpaceCleanForciblyRatio``
(0.85). tidemq keeps that refusal but not Java's forced clean-up: deleting the oldest segments because
another program filled the disk would delete messages acknowledged seconds ago. Retention goes by age
and ``retention_bytes`` only (MessageStore.apply_retention).
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


class DiskGuard:
    def __init__(self, path: Path, full_ratio: float, writable_ratio: float) -> None:
        self.path = path
        self.full_ratio = full_ratio
        self.writable_ratio = writable_ratio
        self.full = False
        self.used_ratio = 0.0

    def check(self) -> bool:
        """Measure the disk's use and update ``full`` (with hysteresis); log once per change."""
        try:
            st = os.statvfs(self.path)
        except OSError as exc:
            log.warning("store: cannot measure disk use of %s: %s", self.path, exc)
            return self.full
        total = st.f_blocks * st.f_frsize
        if total <= 0:
            return self.full
        self.used_ratio = (total - st.f_bfree * st.f_frsize) / total
        if not self.full and self.used_ratio > self.full_ratio:
            self.full = True
            log.error(
                "store: disk %.1f%% used (over %.0f%%): refusing writes until it is below %.0f%%",
                self.used_ratio * 100,
                self.full_ratio * 100,
                self.writable_ratio * 100,
            )
        elif self.full and self.used_ratio < self.writable_ratio:
            self.full = False
            log.warning("store: disk %.1f%% used: accepting writes again", self.used_ratio * 100)
        return self.full

    def refusal(self) -> str:
        return f"disk full ({self.used_ratio:.1%} used, limit {self.full_ratio:.0%}): message not stored"

    async def watch(self, interval_s: float) -> None:
        while True:
            self.check()
            await asyncio.sleep(interval_s)
