"""Process queue: the messages fetched from one message queue and not yet consumed (Java ProcessQueue).

Messages are held in offset order. Flow control reads the cached count, size and offset span; the
committed offset is the smallest offset still held, because everything below it is consumed.
"""

from __future__ import annotations

import asyncio
import time

from tidemq.record import MessageExt

PULL_MAX_IDLE_S = 120.0
LOCK_MAX_LIVE_S = 30.0


class ProcessQueue:
    def __init__(self) -> None:
        self._msgs: dict[int, MessageExt] = {}  # insertion order is offset order: pulls are sequential
        self._taken: dict[int, MessageExt] = {}  # orderly: handed to the listener, not yet committed
        self.msg_count = 0
        self.msg_size = 0
        self.max_offset_seen = -1
        self.dropped = False
        self.locked = False
        self.last_lock_time = 0.0
        self.last_pull_time = time.monotonic()
        self.last_consume_time = time.monotonic()
        self.consuming = False
        self.try_unlock_times = 0
        #: Orderly consumption runs one batch at a time per queue under this lock.
        self.consume_lock = asyncio.Lock()

    def is_dropped(self) -> bool:
        """``dropped`` through a call, for checks after an await (rebalance may drop a queue meanwhile)."""
        return self.dropped

    def put(self, msgs: list[MessageExt]) -> bool:
        """Add pulled messages; True when an orderly consumer must be started for this queue."""
        held, taken = self._msgs, self._taken
        count, size = len(held), self.msg_size
        for msg in msgs:
            offset = msg.queue_offset
            if offset not in held and offset not in taken:
                held[offset] = msg
                size += len(msg.body)
        self.msg_count += len(held) - count
        self.msg_size = size
        if msgs:
            self.max_offset_seen = max(self.max_offset_seen, max(m.queue_offset for m in msgs))
        dispatch = bool(self._msgs) and not self.consuming
        if dispatch:
            self.consuming = True
        return dispatch

    def remove(self, msgs: list[MessageExt]) -> int:
        """Concurrent consumption finished ``msgs``: the offset that may now be committed, or -1."""
        for msg in msgs:
            if self._msgs.pop(msg.queue_offset, None) is not None:
                self.msg_count -= 1
                self.msg_size -= len(msg.body)
        self.last_consume_time = time.monotonic()
        if self._msgs:
            return next(iter(self._msgs))
        return self.max_offset_seen + 1 if self.max_offset_seen >= 0 else -1

    @property
    def span(self) -> int:
        if not self._msgs:
            return 0
        return next(reversed(self._msgs)) - next(iter(self._msgs))

    @property
    def min_offset(self) -> int:
        return next(iter(self._msgs)) if self._msgs else -1

    def messages(self) -> list[MessageExt]:
        return list(self._msgs.values())

    # --- orderly ---------------------------------------------------------------------------------------

    def take(self, count: int) -> list[MessageExt]:
        """Hand the next ``count`` messages to an orderly listener; they stay uncommitted until ``commit``."""
        out: list[MessageExt] = []
        while self._msgs and len(out) < count:
            offset = next(iter(self._msgs))
            msg = self._msgs.pop(offset)
            self._taken[offset] = msg
            out.append(msg)
        if not out:
            self.consuming = False
        return out

    def commit(self) -> int:
        """Orderly: everything taken so far is consumed; forget it and return the next offset, or -1."""
        if not self._taken:
            return -1
        offset = max(self._taken) + 1
        for msg in self._taken.values():
            self.msg_count -= 1
            self.msg_size -= len(msg.body)
        self._taken.clear()
        return offset

    def rollback(self) -> None:
        """Orderly, manual commit: everything taken since the last commit is to be consumed again."""
        self.consume_again(list(self._taken.values()))

    def consume_again(self, msgs: list[MessageExt]) -> None:
        """Orderly batch must be retried: put it back in front, in order."""
        for msg in msgs:
            self._taken.pop(msg.queue_offset, None)
        rest = self._msgs
        self._msgs = {m.queue_offset: m for m in sorted(msgs, key=lambda m: m.queue_offset)}
        self._msgs.update(rest)

    @property
    def lock_expired(self) -> bool:
        return time.monotonic() - self.last_lock_time > LOCK_MAX_LIVE_S

    @property
    def pull_expired(self) -> bool:
        return time.monotonic() - self.last_pull_time > PULL_MAX_IDLE_S

    def info(self, commit_offset: int) -> dict[str, object]:
        """The process-queue part of GET_CONSUMER_RUNNING_INFO (Java ProcessQueueInfo)."""
        values = list(self._msgs)
        return {
            "commitOffset": commit_offset,
            "cachedMsgMinOffset": values[0] if values else 0,
            "cachedMsgMaxOffset": values[-1] if values else 0,
            "cachedMsgCount": self.msg_count,
            "cachedMsgSizeInMiB": self.msg_size // (1024 * 1024),
            "transactionMsgMinOffset": 0,
            "transactionMsgMaxOffset": 0,
            "transactionMsgCount": 0,
            "locked": self.locked,
            "tryUnlockTimes": self.try_unlock_times,
            "lastLockTimestamp": int(self.last_lock_time * 1000),
            "droped": self.dropped,
            "lastPullTimestamp": int(self.last_pull_time * 1000),
            "lastConsumeTimestamp": int(self.last_consume_time * 1000),
        }
