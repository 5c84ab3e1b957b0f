"""Lookup of messages by key: a 64-bit hash of (topic, key) -> commit-log offsets.

The table lives in memory and is backed by an append-only file of 16-byte entries, loaded at start.
Hash collisions only cost a read: callers check the record's own keys before returning it.
"""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

_ENTRY = struct.Struct(">qq")


def key_hash(topic: str, key: str) -> int:
    digest = hashlib.blake2b(f"{topic}\x01{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class KeyIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._table: dict[int, int | list[int]] = {}
        self._pending = bytearray()
        self.covered_until = 0
        if path.exists():
            data = path.read_bytes()
            usable = len(data) - len(data) % _ENTRY.size
            for h, offset in _ENTRY.iter_unpack(data[:usable]):
                self._add(h, offset)
                self.covered_until = max(self.covered_until, offset + 1)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def _add(self, h: int, offset: int) -> None:
        current = self._table.get(h)
        if current is None:
            self._table[h] = offset
        elif isinstance(current, int):
            self._table[h] = [current, offset]
        else:
            current.append(offset)

    def add(self, topic: str, keys: list[str], offset: int) -> None:
        """Index a record's keys. Records come in log order, so one already covered is skipped
        (recovery re-dispatches records the index may hold already)."""
        if offset < self.covered_until:
            return
        self.covered_until = offset + 1
        for key in keys:
            h = key_hash(topic, key)
            self._add(h, offset)
            self._pending += _ENTRY.pack(h, offset)

    def lookup(self, topic: str, key: str) -> list[int]:
        found = self._table.get(key_hash(topic, key))
        if found is None:
            return []
        return [found] if isinstance(found, int) else list(found)

    def flush(self) -> None:
        if self._pending:
            data, self._pending = bytes(self._pending), bytearray()
            os.write(self._fd, data)
        os.fsync(self._fd)

    def forget_below(self, log_min: int) -> None:
        """Drop entries whose records retention has deleted (in memory; the file is rewritten)."""
        kept: dict[int, int | list[int]] = {}
        for h, value in self._table.items():
            offsets = [v for v in ([value] if isinstance(value, int) else value) if v >= log_min]
            if offsets:
                kept[h] = offsets[0] if len(offsets) == 1 else offsets
        self._table = kept
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "wb") as out:
            for h, value in kept.items():
                for offset in [value] if isinstance(value, int) else value:
                    out.write(_ENTRY.pack(h, offset))
            out.flush()
            os.fsync(out.fileno())
        os.close(self._fd)
        os.replace(tmp, self.path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self._pending.clear()

    def close(self) -> None:
        self.flush()
        os.close(self._fd)
