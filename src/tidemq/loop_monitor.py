"""How late the server's event loop runs (issue 23: "the event loop never blocks for long").

Every request is handled on one loop, so one slow request delays every client of every protocol. A
task asks to wake every INTERVAL_S and measures how much later it really woke: that lag is how long
something held the loop. A lag past the warning threshold is logged (one line per ``warn_every_s`` at
most, counting the ones left out), and the worst since start is exported as ``loopLagMaxMs`` in the
broker's runtime info (GET_BROKER_RUNTIME_INFO), where an operator can read it; nsqd's ``/stats`` keeps
the real nsqd's exact shape, so it is not there.
"""

from __future__ import annotations

import asyncio
import logging
import time

log = logging.getLogger(__name__)

#: How often the monitor wakes; a stall shorter than this can go unseen.
INTERVAL_S = 0.05
#: A lag worth a warning line: longer than a request may hold the loop by far.
WARN_MS = 200.0
#: At most one warning line per this many seconds.
WARN_EVERY_S = 10.0


class LoopMonitor:
    def __init__(
        self, interval_s: float = INTERVAL_S, warn_ms: float = WARN_MS, warn_every_s: float = WARN_EVERY_S
    ) -> None:
        self.interval_s = interval_s
        self.warn_ms = warn_ms
        self.warn_every_s = warn_every_s
        #: The worst lag seen since start, in ms.
        self.worst_ms = 0.0
        #: Lags past ``warn_ms`` since start.
        self.stalls = 0
        self._last_warning = -float("inf")
        self._unlogged = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="loop-monitor")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time() + self.interval_s
            await asyncio.sleep(self.interval_s)
            self.observe((loop.time() - asked) * 1000)

    def observe(self, lag_ms: float) -> None:
        """One wake-up ``lag_ms`` late."""
        self.worst_ms = max(self.worst_ms, lag_ms)
        if lag_ms < self.warn_ms:
            return
        self.stalls += 1
        now = time.monotonic()
        if now - self._last_warning < self.warn_every_s:
            self._unlogged += 1
            return
        more = f" ({self._unlogged} more since the last warning)" if self._unlogged else ""
        log.warning("event loop stalled %.0f ms (worst since start %.0f ms)%s", lag_ms, self.worst_ms, more)
        self._last_warning, self._unlogged = now, 0


#: The server process's monitor: ``embedded.serve`` runs it; nsqd's /stats and the broker's runtime info
#: read it (0 while it does not run, as in a library embedding only a client).
MONITOR = LoopMonitor()
