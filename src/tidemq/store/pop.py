"""Pop-style consumption state: what each consumer group received from each queue, and until when it is
invisible (docs/store.md#pop-state).

RocketMQ 5.x consumers do not keep offsets: they *pop* messages, each invisible to the rest of the group
until its invisible time, and ack each by its receipt handle; a message not acked in time is visible
again and is delivered once more, one attempt later. This module keeps that state per (group, topic,
queue), apart from the offsets of remoting consumers, so a remoting group and a popping group on the
same topic never meet. It hands out queue offsets; the caller reads the messages from the message store.

Per queue the state is a *position* (every offset below it was handed out or passed over by a filter)
and the messages *in flight* (handed out, not acked): offset -> lease serial, visible-at, attempt. An
offset below the position and not in flight is acked, so acked messages cost nothing in memory, and the
committed offset (what a lag report shows) is the lowest in flight, else the position: it only moves
forward past acked messages. In FIFO mode a queue with a message in flight and still invisible hands
out nothing (RocketMQ's ConsumerOrderInfoManager), so its messages reach one receiver at a time, in
order; once the invisible time passes, the same messages come again, in order, one attempt later.

Every change is logged (``pop_log``) before the call returns; ``ack`` and ``change_invisible`` also
await the fsync in sync flush mode (group commit), an async flush mode fsyncs every flush interval.
"""

from __future__ import annotations

import asyncio
import enum
import heapq
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tidemq.store.config import FlushMode, StoreConfig
from tidemq.store.pop_handle import InvalidReceiptHandle, ReceiptHandle
from tidemq.store.pop_log import (
    AckRecord,
    KeyRecord,
    LeaseRecord,
    PopLog,
    PositionRecord,
    Record,
    SerialRecord,
)

log = logging.getLogger(__name__)

__all__ = [
    "AckStatus",
    "InitMode",
    "InvalidReceiptHandle",
    "PopLease",
    "PopStore",
    "ReceiptHandle",
]

#: How many offsets one receive may pass over for a filter before it returns what it has.
MAX_SCAN = 10_000


class InitMode(enum.StrEnum):
    """Where a group's first pop of a queue starts (RocketMQ ConsumeInitMode; the 5.x proxy uses MAX)."""

    MIN = "min"
    #: The queue's last message (max offset - 1), so a new group gets what arrives from now on plus one.
    MAX = "max"


class AckStatus(enum.Enum):
    """The outcome of ``ack`` and ``change_invisible``; the Apache RocketMQ 5.x proxy's answer for each:

    - OK: Code.OK.
    - EXPIRED: the handle's invisible time has passed (the message may be with another receiver);
      the proxy refuses before asking the broker: Code.INVALID_RECEIPT_HANDLE (40013), "receipt handle
      is expired".
    - SUPERSEDED: the message is in flight under a newer handle (redelivered, or its invisible time
      changed); ALREADY_ACKED: the message was acked; NOT_FOUND: the handle names an offset never handed
      out (forged). The 5.x broker acks any offset inside the queue, so the proxy answers an ack with a
      superseded or already acked handle Code.OK (which acks nothing here); NOT_FOUND gets
      Code.INTERNAL_SERVER_ERROR, "ack failed: status is abnormal" (grpc/consumer.py ``ack_status``).
    """

    OK = "ok"
    EXPIRED = "expired"
    SUPERSEDED = "superseded"
    ALREADY_ACKED = "already acked"
    NOT_FOUND = "not found"


@dataclass(frozen=True, slots=True)
class PopLease:
    """One message handed out: read it at ``offset`` of the queue; ``attempt`` counts from 1."""

    offset: int
    attempt: int
    visible_at: int
    receipt_handle: str


@dataclass(slots=True)
class _Inflight:
    serial: int
    visible_at: int
    attempt: int


@dataclass(slots=True)
class _Queue:
    key_id: int
    group: str
    topic: str
    queue_id: int
    position: int = 0
    inflight: dict[int, _Inflight] = field(default_factory=dict)
    #: (visible_at, offset, serial) of every lease; entries of acked or re-leased offsets are skipped.
    due: list[tuple[int, int, int]] = field(default_factory=list)

    def lease(self, offset: int, entry: _Inflight) -> None:
        self.inflight[offset] = entry
        self.position = max(self.position, offset + 1)
        heapq.heappush(self.due, (entry.visible_at, offset, entry.serial))
        if len(self.due) > 2 * len(self.inflight) + 1024:
            self.due = [(e.visible_at, o, e.serial) for o, e in self.inflight.items()]
            heapq.heapify(self.due)

    def pop_visible(self, now_ms: int, limit: int) -> list[int]:
        """In-flight offsets whose invisible time has passed, earliest first."""
        out: list[int] = []
        while self.due and self.due[0][0] <= now_ms and len(out) < limit:
            _, offset, serial = heapq.heappop(self.due)
            entry = self.inflight.get(offset)
            if entry is not None and entry.serial == serial:
                out.append(offset)
        return out

    def next_visible_at(self) -> int | None:
        while self.due:
            visible_at, offset, serial = self.due[0]
            entry = self.inflight.get(offset)
            if entry is not None and entry.serial == serial:
                return visible_at
            heapq.heappop(self.due)
        return None


Key = tuple[str, str, int]


class PopStore:
    """The pop state of every (group, topic, queue), in ``directory`` (``<data dir>/pop``)."""

    def __init__(
        self,
        directory: Path,
        flush_mode: FlushMode = FlushMode.ASYNC,
        flush_interval_ms: int = 500,
        compact_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        self.flush_mode = flush_mode
        self.flush_interval_ms = flush_interval_ms
        self.compact_bytes = compact_bytes
        self._log = PopLog(directory)
        self._queues: dict[Key, _Queue] = {}
        self._by_id: dict[int, _Queue] = {}
        self._serial = 0
        self._compacted_size = 0
        self._task: asyncio.Task[None] | None = None
        self._recover()

    @classmethod
    def for_store(cls, config: StoreConfig) -> PopStore:
        """The pop state beside a message store, flushed the way its commit log is."""
        return cls(config.data_dir / "pop", config.flush_mode, config.flush_interval_ms)

    def _recover(self) -> None:
        for record in self._log.replay():
            self._apply(record)
        self._compacted_size = self._log.size
        log.info(
            "pop state: %d queues, %d messages in flight",
            len(self._queues),
            sum(len(q.inflight) for q in self._queues.values()),
        )

    def _apply(self, record: Record) -> None:
        match record:
            case LeaseRecord(key_id, offset, serial, visible_at, attempt):
                self._by_id[key_id].lease(offset, _Inflight(serial, visible_at, attempt))
                self._serial = max(self._serial, serial)
            case AckRecord(key_id, offset):
                self._by_id[key_id].inflight.pop(offset, None)
            case PositionRecord(key_id, position):
                queue = self._by_id[key_id]
                queue.position = max(queue.position, position)
            case KeyRecord(key_id, group, topic, queue_id):
                queue = _Queue(key_id, group, topic, queue_id)
                self._queues[(group, topic, queue_id)] = self._by_id[key_id] = queue
            case SerialRecord(serial):
                self._serial = max(self._serial, serial)

    # --- background flushing ------------------------------------------------------------------------

    async def start(self) -> None:
        self._task = asyncio.create_task(self._flush_loop(), name="pop-state-flush")

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval_ms / 1000)
            try:
                await self.flush()
            except OSError as exc:
                log.error("pop state: flush failed: %s", exc)

    async def flush(self) -> None:
        """fsync what was logged; rewrite the log as the live state once it has grown enough."""
        if self._log.size > max(self.compact_bytes, 2 * self._compacted_size):
            await self._log.rewrite(self._snapshot)
            self._compacted_size = self._log.size
            log.info("pop state: log compacted to %d bytes", self._log.size)
        elif self._log.dirty:
            await self._log.sync()

    def _snapshot(self) -> Iterator[Record]:
        yield SerialRecord(self._serial)
        for q in self._queues.values():
            yield KeyRecord(q.key_id, q.group, q.topic, q.queue_id)
            yield PositionRecord(q.key_id, q.position)
            for offset, e in q.inflight.items():
                yield LeaseRecord(q.key_id, offset, e.serial, e.visible_at, e.attempt)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task])
            self._task = None
        await self.flush()
        self._log.close()

    async def _durable(self) -> None:
        if self.flush_mode is FlushMode.SYNC:
            await self._log.sync()

    # --- queries ------------------------------------------------------------------------------------

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int:
        """Every offset below this is acked (or passed over); -1 when the group never popped the queue."""
        queue = self._queues.get((group, topic, queue_id))
        if queue is None:
            return -1
        return min(queue.inflight, default=queue.position)

    def topics_of(self, group: str) -> list[str]:
        """The topics ``group`` has popped from (what a consume-stats report of the group covers)."""
        return sorted({t for g, t, _ in self._queues if g == group})

    def groups_of(self, topic: str) -> set[str]:
        """The groups that have popped from ``topic`` (who consumes it, online or not)."""
        return {g for g, t, _ in self._queues if t == topic}

    def inflight_count(self, group: str, topic: str, queue_id: int) -> int:
        queue = self._queues.get((group, topic, queue_id))
        return 0 if queue is None else len(queue.inflight)

    def next_visible_at(self, group: str, topic: str, queue_id: int) -> int | None:
        """When the earliest message in flight is visible again (a long poll's wake-up), None if none."""
        queue = self._queues.get((group, topic, queue_id))
        return None if queue is None else queue.next_visible_at()

    # --- receive ------------------------------------------------------------------------------------

    def _queue(self, key: Key, position: int, records: list[Record]) -> _Queue:
        queue = self._queues.get(key)
        if queue is None:
            key_id = len(self._by_id)
            queue = _Queue(key_id, *key, position=position)
            self._queues[key] = self._by_id[key_id] = queue
            records += [KeyRecord(key_id, *key), PositionRecord(key_id, position)]
        return queue

    def receive(
        self,
        group: str,
        topic: str,
        queue_id: int,
        max_count: int,
        invisible_ms: int,
        now_ms: int,
        *,
        min_offset: int,
        max_offset: int,
        fifo: bool = False,
        init_mode: InitMode = InitMode.MAX,
        accept: Callable[[int], bool] | None = None,
        first_in_memory: bool = False,
    ) -> list[PopLease]:
        """Hand out up to ``max_count`` visible messages of the queue, each invisible until
        ``now_ms + invisible_ms``: first those whose invisible time passed (one attempt later), then new
        ones from the position. ``min_offset``/``max_offset`` are the queue's (the message store's);
        ``accept(offset)`` is the caller's filter: a new offset it rejects is passed over for good, as a
        RocketMQ pop passes over messages its subscription does not match. ``first_in_memory``: the
        queue's offset 0 still exists and is in memory, so a new group in MAX mode starts at 0 (the
        broker's initPopOffsetByCheckMsgInMem rule: a hot queue is read from its start). Logged before
        it returns."""
        if max_count <= 0 or invisible_ms < 0:
            raise ValueError("max_count must be positive and invisible_ms not negative")
        records: list[Record] = []
        if init_mode is InitMode.MIN or (min_offset <= 0 and first_in_memory):
            start = min_offset
        else:
            start = max(max_offset - 1, 0)
        queue = self._queue((group, topic, queue_id), max(start, min_offset), records)
        if queue.position < min_offset:
            queue.position = min_offset
            records.append(PositionRecord(queue.key_id, min_offset))
        for gone in [o for o in queue.inflight if o < min_offset]:
            del queue.inflight[gone]  # the message itself was deleted by retention
            records.append(AckRecord(queue.key_id, gone))

        visible_at = now_ms + invisible_ms
        if fifo:
            if any(e.visible_at > now_ms for e in queue.inflight.values()):
                self._log.append(records)
                return []
            again = sorted(queue.inflight)[:max_count]
        else:
            again = queue.pop_visible(now_ms, max_count)
        chosen = [(o, queue.inflight[o].attempt + 1) for o in again]
        scanned = 0
        while len(chosen) < max_count and queue.position < max_offset and scanned < MAX_SCAN:
            offset = queue.position
            queue.position += 1
            scanned += 1
            if accept is None or accept(offset):
                chosen.append((offset, 1))
        leases: list[PopLease] = []
        start_offset = min((o for o, _ in chosen), default=0)
        for offset, attempt in chosen:
            self._serial += 1
            queue.lease(offset, _Inflight(self._serial, visible_at, attempt))
            records.append(LeaseRecord(queue.key_id, offset, self._serial, visible_at, attempt))
            handle = ReceiptHandle(start_offset, now_ms, invisible_ms, self._serial, queue_id, offset, topic)
            leases.append(PopLease(offset, attempt, visible_at, handle.encode()))
        if scanned:
            records.append(PositionRecord(queue.key_id, queue.position))
        self._log.append(records)
        return leases

    # --- ack and change -----------------------------------------------------------------------------

    def _check(self, group: str, handle: ReceiptHandle, now_ms: int) -> tuple[AckStatus, _Queue | None]:
        queue = self._queues.get((group, handle.topic, handle.queue_id))
        if queue is None or handle.offset >= queue.position:
            return AckStatus.NOT_FOUND, None
        if handle.is_expired(now_ms):
            return AckStatus.EXPIRED, None
        entry = queue.inflight.get(handle.offset)
        if entry is None:
            return AckStatus.ALREADY_ACKED, None
        if entry.serial != handle.serial:
            return AckStatus.SUPERSEDED if entry.serial > handle.serial else AckStatus.NOT_FOUND, None
        return AckStatus.OK, queue

    async def ack(self, group: str, receipt_handle: str, now_ms: int) -> AckStatus:
        """Ack the message the handle was issued for; OK only once the ack is logged (and fsynced in
        sync flush mode). Raises InvalidReceiptHandle for a handle that does not parse."""
        status = self.ack_now(group, receipt_handle, now_ms)
        if status is AckStatus.OK:
            await self._durable()
        return status

    def ack_now(self, group: str, receipt_handle: str, now_ms: int) -> AckStatus:
        """``ack`` logged but not awaited to disk: for the server's own acks (a message moved to the
        dead-letter queue, one deleted by retention), where a lost ack means a redelivery, not a loss."""
        handle = ReceiptHandle.decode(receipt_handle)
        status, queue = self._check(group, handle, now_ms)
        if queue is None:
            return status
        del queue.inflight[handle.offset]
        self._log.append([AckRecord(queue.key_id, handle.offset)])
        return status

    async def change_invisible(
        self, group: str, receipt_handle: str, invisible_ms: int, now_ms: int
    ) -> tuple[AckStatus, PopLease | None]:
        """Make the message invisible for ``invisible_ms`` from now under a new handle (the old one
        goes stale), same attempt: a nack with backoff, or a renewal. Raises InvalidReceiptHandle."""
        if invisible_ms < 0:
            raise ValueError("invisible_ms must not be negative")
        handle = ReceiptHandle.decode(receipt_handle)
        status, queue = self._check(group, handle, now_ms)
        if queue is None:
            return status, None
        attempt = queue.inflight[handle.offset].attempt
        self._serial += 1
        visible_at = now_ms + invisible_ms
        queue.lease(handle.offset, _Inflight(self._serial, visible_at, attempt))
        self._log.append([LeaseRecord(queue.key_id, handle.offset, self._serial, visible_at, attempt)])
        h = handle
        new = ReceiptHandle(h.start_offset, now_ms, invisible_ms, self._serial, h.queue_id, h.offset, h.topic)
        await self._durable()
        return status, PopLease(handle.offset, attempt, visible_at, new.encode())
