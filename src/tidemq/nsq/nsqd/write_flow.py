"""Back-pressure towards one subscriber (issue 23: a client that never reads must not hold the server's
memory): delivery stops while the transport's buffer is over its high-water mark or a loop pass already
queued WRITE_BYTES of bodies for it, and a client whose writes stay paused for a heartbeat interval is
disconnected, as nsqd's write deadline does (docs/nsq-server.md#memory-bounds)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tidemq.nsq.nsqd.channel import WRITE_BYTES

#: The transport's write buffer high-water mark: past it asyncio pauses writing and delivery stops until
#: the client reads it down to a quarter of it.
OUTPUT_HIGH_WATER = 1024 * 1024


class WriteFlow:
    def __init__(self, on_stalled: Callable[[], None]) -> None:
        #: Set while the transport's buffer is over its high-water mark (the client is not reading).
        self.paused = False
        #: Bytes of message bodies queued for the output this loop pass.
        self.queued_bytes = 0
        self._on_stalled = on_stalled
        self._timer: asyncio.TimerHandle | None = None

    @property
    def open(self) -> bool:
        """Whether more messages may be delivered now."""
        return not self.paused and self.queued_bytes < WRITE_BYTES

    def pause(self, deadline_s: float) -> None:
        self.paused = True
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(deadline_s, self._stalled)

    def resume(self) -> None:
        self.paused = False
        self.cancel()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def written(self) -> bool:
        """The queued output went out: True if delivery had been waiting for that write."""
        full = self.queued_bytes >= WRITE_BYTES
        self.queued_bytes = 0
        return full

    def _stalled(self) -> None:
        self._timer = None
        if self.paused:
            self._on_stalled()
