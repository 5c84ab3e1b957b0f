"""Consumer offsets (``config/consumerOffset.json``): how far each group has consumed each queue.

The table is kept in memory, changed by every offset commit, and persisted as a durable JSON document of
the store periodically and at close. The schedule service keeps its per-level offsets in one too
(``config/delayOffset.json``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tidemq.store.documents import JsonSnapshots, read_json


class OffsetTable:
    """``topic@group -> {queueId: offset}``, kept in memory and flushed periodically and on close.

    Also used for the schedule service's per-level offsets (``delayOffset.json``).
    """

    def __init__(self, path: Path, root_key: str) -> None:
        self.path = path
        self.root_key = root_key
        raw = read_json(path, {}).get(root_key, {})
        self.table: dict[str, dict[int, int]] = {
            key: {int(q): int(o) for q, o in queues.items()} for key, queues in raw.items()
        }
        self.dirty = False
        self._file = JsonSnapshots(path)

    def get(self, key: str, queue_id: int) -> int | None:
        return self.table.get(key, {}).get(queue_id)

    def set(self, key: str, queue_id: int, offset: int) -> None:
        self.table.setdefault(key, {})[queue_id] = offset
        self.dirty = True

    def remove_topic(self, topic: str) -> None:
        """Forget every group's offsets of ``topic`` (keys are ``topic@group``)."""
        self.remove_where(lambda k: k.split("@", 1)[0] == topic)

    def remove_where(self, predicate: Any) -> None:
        for key in [k for k in self.table if predicate(k)]:
            del self.table[key]
            self.dirty = True

    def snapshot(self) -> dict[str, Any]:
        return {self.root_key: {k: {str(q): o for q, o in v.items()} for k, v in self.table.items()}}

    def persist(self, force: bool = False) -> None:
        if self.dirty or force:
            self.dirty = False
            self._file.write_now(self.snapshot())

    async def persist_off_loop(self) -> None:
        """The periodic persist: the snapshot is taken on the loop, the write and its fsync happen on a
        worker thread, so the loop (and every request it serves) never waits on the disk."""
        if self.dirty:
            self.dirty = False
            try:
                await self._file.write_off_loop(self.snapshot())
            except OSError:
                self.dirty = True
                raise
