"""Broker-side queue locks for orderly consumption (docs/protocols/rocketmq-consumption.md#queue-locks): one
client per queue, 60 s lease."""

from __future__ import annotations

import time
from dataclasses import dataclass

QueueKey = tuple[str, str, int]  # topic, broker name, queue id


@dataclass(slots=True)
class _Lock:
    client_id: str
    last_update: float


class RebalanceLockManager:
    def __init__(self, max_live_s: float = 60.0) -> None:
        self.max_live_s = max_live_s
        self._groups: dict[str, dict[QueueKey, _Lock]] = {}

    def try_lock_batch(self, group: str, queues: list[QueueKey], client_id: str) -> list[QueueKey]:
        now = time.monotonic()
        table = self._groups.setdefault(group, {})
        held = []
        for mq in queues:
            lock = table.get(mq)
            if lock is None or lock.client_id == client_id or now - lock.last_update > self.max_live_s:
                table[mq] = _Lock(client_id, now)
                held.append(mq)
        return held

    def unlock_batch(self, group: str, queues: list[QueueKey], client_id: str) -> None:
        table = self._groups.get(group, {})
        for mq in queues:
            lock = table.get(mq)
            if lock is not None and lock.client_id == client_id:
                del table[mq]

    def holder(self, group: str, mq: QueueKey) -> str | None:
        lock = self._groups.get(group, {}).get(mq)
        if lock is None or time.monotonic() - lock.last_update > self.max_live_s:
            return None
        return lock.client_id
