"""An nsqd topic on tidemq's store: a log (``nsq:<name>``, queue 0) with its channels, the backlog a first
channel receives, and the chunked MPUBs in progress or aborted (docs/protocols/nsq-nsqd.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tidemq.nsq.nsqd.channel import STORE_PREFIX, Channel, MemoryBudget
from tidemq.nsq.nsqd.chunked_publish import overlap
from tidemq.nsq.nsqd.fin_journal import FinJournal
from tidemq.nsq.nsqd.quantile import LatencySettings
from tidemq.nsq.protocol import is_ephemeral
from tidemq.store import MessageStore


@dataclass(slots=True)
class Topic:
    name: str
    store: MessageStore
    #: Where FINs are recorded until the next snapshot (None: not kept, as in a bare test topic).
    journal: FinJournal | None = None
    #: The e2e processing latency to track for each channel (None: not tracked).
    latency: LatencySettings | None = None
    #: The server's bound on bytes waiting in channels' memory, shared by every topic.
    budget: MemoryBudget = field(default_factory=MemoryBudget)
    paused: bool = False
    #: Where the backlog starts that the first channel to appear will receive.
    backlog_offset: int = 0
    channels: dict[str, Channel] = field(default_factory=dict)
    #: Told (channel name, created?) when a channel appears or goes, so lookupd can be told too.
    on_channel: Callable[[str, bool], None] | None = None
    #: Published since this process started, as nsqd counts them.
    message_count: int = 0
    message_bytes: int = 0
    #: Chunked MPUBs in progress (id -> first offset): channels read only below the lowest
    #: (nsqd/chunked_publish.py). Persisted, so that one a crash cut short is aborted at start.
    mpubs: dict[str, int] = field(default_factory=dict)
    #: Offset ranges [start, end) of chunked MPUBs that failed midway: stored, never delivered.
    aborted: list[tuple[int, int]] = field(default_factory=list)

    @property
    def store_topic(self) -> str:
        return STORE_PREFIX + self.name

    @property
    def ephemeral(self) -> bool:
        return is_ephemeral(self.name)

    @property
    def end_offset(self) -> int:
        return self.store.max_offset(self.store_topic, 0)

    @property
    def readable_end(self) -> int:
        """Where channels stop reading: the log's end, or the first offset of a chunked MPUB still being
        stored (so none of it is seen before all of it is)."""
        end = self.end_offset
        return min(end, *self.mpubs.values()) if self.mpubs else end

    def channel(self, name: str) -> Channel:
        """Get or create; a new channel sees the backlog if it is the first, else only what comes next."""
        ch = self.channels.get(name)
        if ch is None:
            start = self.backlog_offset if not self.channels else self.readable_end
            ch = self.channels[name] = Channel(self, name, start)
            if self.on_channel is not None:
                self.on_channel(name, True)
        return ch

    def remove_channel(self, name: str) -> Channel | None:
        ch = self.channels.pop(name, None)
        if ch is not None:
            ch.deleted = True
            ch.release_all()
            for client in list(ch.clients):
                client.close()
            if not self.channels:
                self.backlog_offset = self.readable_end
            if self.on_channel is not None:
                self.on_channel(name, False)
        return ch

    def pump(self) -> None:
        for ch in list(self.channels.values()):
            ch.pump()

    @property
    def depth(self) -> int:
        """What waits in the topic itself: only the backlog kept while it has no channel."""
        if self.channels:
            return 0
        end = self.readable_end
        return max(0, end - self.backlog_offset - overlap(self.aborted, self.backlog_offset, end))

    def prune_aborted(self) -> None:
        """Forget the aborted ranges nothing can read again: below every channel's read floor (the backlog
        when there is none; a channel created later starts at the log's end) or below the store's
        retention floor. Called as channels move on and before each snapshot."""
        if not self.aborted:
            return
        floors = [ch.read_floor for ch in self.channels.values()] or [self.backlog_offset]
        floor = max(min(floors), self.store.min_offset(self.store_topic, 0))
        if self.aborted[0][1] <= floor:
            self.aborted = [r for r in self.aborted if r[1] > floor]

    def empty(self) -> None:
        self.backlog_offset = self.readable_end

    def snapshot(self) -> dict[str, Any]:
        self.prune_aborted()
        return {
            "name": self.name,
            "paused": self.paused,
            "backlog": self.backlog_offset,
            "mpubs": dict(self.mpubs) or None,
            "aborted": [list(r) for r in self.aborted] or None,
            "channels": [ch.snapshot() for ch in self.channels.values() if not ch.ephemeral] or None,
        }
