"""Lookup of messages by key: 16-byte entries of (64-bit hash of topic and key, commit-log offset).

Every message's unique id is indexed, so adding must be cheap and must not grow memory with the log:
entries are only appended (to a buffer, written at each flush), and a lookup scans the file for the
hash with ``bytes.find``, which runs at memory speed. Lookups by key are rare admin queries; hash
collisions only cost a read, because callers check the record's own keys before returning it.
The hash is CRC-32 and CRC-32C of the same bytes side by side: two C calls.
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from crc32c import crc32c

_ENTRY = struct.Struct(">qq")
_HASH = struct.Struct(">q")
_CHUNK_BYTES = 1 << 20


def key_hash(topic: str, key: str) -> int:
    return _hash(f"{topic}\x01{key}".encode())


def _hash(data: bytes) -> int:
    h = zlib.crc32(data) << 32 | crc32c(data)
    return h - (1 << 64) if h >> 63 else h


def key_hashes(topic: str, keys: list[list[bytes]]) -> list[list[int]]:
    """The hashes ``add_many`` would index for each record's UTF-8 ``keys`` in ``topic``."""
    prefix = f"{topic}\x01".encode()
    return [[_hash(prefix + key) for key in record_keys] for record_keys in keys]


@dataclass(slots=True)
class IndexSlot:
    data: bytearray
    done: bool
    covered_before: int


class KeyIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._pending = bytearray()
        #: Entries written to the file but not yet fsynced: the flusher fsyncs while this holds, so a failed
        #: fsync is retried before a checkpoint can pass those entries.
        self.dirty = False
        #: Entries held back behind a big batch still being indexed in steps (see ``open_slot``).
        self._slots: list[IndexSlot] = []
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        size = os.fstat(self._fd).st_size
        usable = size - size % _ENTRY.size
        if usable != size:  # a torn last entry
            os.ftruncate(self._fd, usable)
        self.covered_until = 0
        if usable:
            _, last = _ENTRY.unpack(os.pread(self._fd, _ENTRY.size, usable - _ENTRY.size))
            self.covered_until = last + 1

    def add(self, topic: str, keys: list[str], offset: int) -> None:
        """Index a record's keys. Records come in log order, so one already covered is skipped
        (recovery re-dispatches records the index may hold already). ``add_many`` for one record, without
        its lists: every single send indexes its unique id."""
        if offset < self.covered_until:
            return
        pack = _ENTRY.pack
        self._sink().extend(b"".join([pack(_hash(f"{topic}\x01{key}".encode()), offset) for key in keys]))
        self.covered_until = offset + 1

    def add_hashed(self, hashes: list[list[int]], offsets: list[int]) -> None:
        """``add_many`` with the keys' hashes worked out ahead (``key_hashes``)."""
        pack, covered = _ENTRY.pack, self.covered_until
        pending = [
            pack(h, offset)
            for record_hashes, offset in zip(hashes, offsets, strict=True)
            if offset >= covered
            for h in record_hashes
        ]
        if offsets:
            self.covered_until = max(covered, offsets[-1] + 1)
        self._sink().extend(b"".join(pending))

    def add_many(self, topic: str, keys: list[list[bytes]], offsets: list[int]) -> None:
        """Index the UTF-8 keys of records appended in log order (``keys[i]`` go with ``offsets[i]``)."""
        prefix = f"{topic}\x01".encode()
        pack, covered = _ENTRY.pack, self.covered_until
        pending = [
            pack(_hash(prefix + key), offset)
            for record_keys, offset in zip(keys, offsets, strict=True)
            if offset >= covered
            for key in record_keys
        ]
        if offsets:
            self.covered_until = max(covered, offsets[-1] + 1)
        self._sink().extend(b"".join(pending))

    def _sink(self) -> bytearray:
        return self._slots[-1].data if self._slots else self._pending

    def open_slot(self, last_offset: int) -> IndexSlot:
        """Make room, in log order, for the entries of records up to ``last_offset`` that a big batch
        indexes in steps (``fill_slot``): entries added meanwhile, for later records, wait behind it, so
        the file stays in log order (``forget_from`` and recovery rely on it)."""
        slot = IndexSlot(bytearray(), False, self.covered_until)
        self._slots += [slot, IndexSlot(bytearray(), True, 0)]
        self.covered_until = max(self.covered_until, last_offset + 1)
        return slot

    @staticmethod
    def fill_slot(slot: IndexSlot, hashes: list[list[int]], offsets: list[int]) -> None:
        pack = _ENTRY.pack
        slot.data += b"".join([pack(h, off) for hs, off in zip(hashes, offsets, strict=True) for h in hs])

    def close_slot(self, slot: IndexSlot, discard: bool = False) -> None:
        """The batch is indexed (or, ``discard``, refused): its entries and those behind it go pending."""
        if discard:
            slot.data.clear()
            if len(self._slots) >= 2 and self._slots[-2] is slot and not self._slots[-1].data:
                self.covered_until = slot.covered_before  # nothing was indexed after it
        slot.done = True
        while self._slots and self._slots[0].done:
            self._pending += self._slots.pop(0).data

    def lookup(self, topic: str, key: str) -> list[int]:
        target = _HASH.pack(key_hash(topic, key))
        found = []
        size = os.fstat(self._fd).st_size
        if size:
            with mmap.mmap(self._fd, size, access=mmap.ACCESS_READ) as data:
                found = _find(data, target)
        return (
            found
            + _find(self._pending, target)
            + [o for slot in self._slots for o in _find(slot.data, target)]
        )

    def write_pending(self) -> None:
        """Write what was added since the last call to the file (not fsynced), marking the index dirty."""
        if not self._pending:
            return
        size = os.fstat(self._fd).st_size
        view = memoryview(self._pending)
        done = 0
        try:
            while done < len(view):
                done += os.write(self._fd, view[done:])
        except OSError:
            # A full disk: the entries stay pending for the next flush (the caller's checkpoint does not
            # pass them meanwhile), and the part that was written goes, so no entry is torn or doubled.
            view.release()
            os.ftruncate(self._fd, size)
            raise
        view.release()
        self._pending = bytearray()
        self.dirty = True

    def fileno(self) -> int:
        return self._fd

    def flush(self) -> None:
        self.write_pending()
        os.fsync(self._fd)
        self.dirty = False

    def _first_entry_at_or_past(self, log_offset: int) -> int:
        """Index (in entries) of the first entry for ``log_offset`` or later: entries are in log order."""
        lo, hi = 0, os.fstat(self._fd).st_size // _ENTRY.size
        while lo < hi:
            mid = (lo + hi) // 2
            _, offset = _ENTRY.unpack(os.pread(self._fd, _ENTRY.size, mid * _ENTRY.size))
            if offset < log_offset:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def forget_from(self, log_end: int) -> None:
        """Drop entries for records at or past ``log_end``: after a crash the index can hold entries for
        a log tail that recovery cut off, and it would skip indexing the records written there next."""
        self.flush()
        keep = self._first_entry_at_or_past(log_end)
        if keep * _ENTRY.size < os.fstat(self._fd).st_size:
            os.ftruncate(self._fd, keep * _ENTRY.size)
            os.fsync(self._fd)
        self.covered_until = min(self.covered_until, log_end)

    def forget_below(self, log_min: int) -> None:
        """Drop entries whose records retention has deleted. Entries are appended in log order, so
        those are a prefix of the file: the rest is copied, as is, to a file that replaces it."""
        self.flush()
        size = os.fstat(self._fd).st_size
        lo = self._first_entry_at_or_past(log_min)
        if lo == 0:
            return
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "wb") as out:
            pos = lo * _ENTRY.size
            while pos < size:
                chunk = os.pread(self._fd, min(_CHUNK_BYTES, size - pos), pos)
                if not chunk:
                    break
                out.write(chunk)
                pos += len(chunk)
            out.flush()
            os.fsync(out.fileno())
        os.close(self._fd)
        os.replace(tmp, self.path)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND)

    def close(self) -> None:
        self.flush()
        os.close(self._fd)


def _find(data: bytes | bytearray | mmap.mmap, target: bytes) -> list[int]:
    """Offsets of the entries in ``data`` whose hash is ``target`` (matches off the entry grid skipped)."""
    found = []
    i = data.find(target)
    while i >= 0:
        if i % _ENTRY.size == 0:
            found.append(_ENTRY.unpack_from(data, i)[1])
        i = data.find(target, i + 1)
    return found
