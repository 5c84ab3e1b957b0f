"""Durable JSON documents: the small metadata files a front-end keeps beside the log.

A document is one JSON file replaced atomically (written to ``<name>.tmp``, fsynced, renamed over the
old one), so a crash leaves either the old document or the new one, never a torn mix. Each front-end
keeps its documents in its own folder of the data dir (:meth:`MessageStore.documents`); the store's own
checkpoint is one too. Values are whatever orjson writes, indented, with non-string keys allowed.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import orjson


def fsync_directory(directory: Path) -> None:
    """Make a rename or a new file in ``directory`` durable (Linux needs the folder itself synced)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, value: Any) -> None:
    """Replace the document at ``path`` by ``value``, durably (its folder is created if missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    data = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    with open(tmp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def read_json(path: Path, default: Any) -> Any:
    """The document at ``path``, or ``default`` when there is none yet."""
    try:
        return orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return default


class JsonSnapshots:
    """One JSON file replaced by numbered snapshots, written now (on the caller's thread) or on a worker
    thread so an event loop never waits on the disk; a snapshot taken earlier but written later never
    replaces a newer one (the close-time write races the last periodic one)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        #: The value of the newest snapshot written, for callers that skip writing an unchanged state.
        self.last: Any = None
        self._lock = threading.Lock()
        self._taken = 0
        self._written = 0

    def take(self, value: Any) -> tuple[int, Any]:
        self._taken += 1
        return self._taken, value

    def write(self, number: int, value: Any) -> None:
        with self._lock:
            if number > self._written:
                write_json_atomic(self.path, value)
                self._written, self.last = number, value

    def write_now(self, value: Any) -> None:
        self.write(*self.take(value))

    async def write_off_loop(self, value: Any) -> None:
        """``value`` is a snapshot already taken on the loop; only the write and its fsync move."""
        await asyncio.to_thread(self.write, *self.take(value))


class Documents:
    """The named JSON documents in one folder of the data dir (``config/`` for the broker's tables)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, name: str) -> Path:
        return self.directory / name

    def read(self, name: str, default: Any) -> Any:
        return read_json(self.path(name), default)

    def write(self, name: str, value: Any) -> None:
        write_json_atomic(self.path(name), value)

    def snapshots(self, name: str) -> JsonSnapshots:
        """Snapshots of the document ``name``, for one writer that persists it again and again."""
        return JsonSnapshots(self.path(name))
