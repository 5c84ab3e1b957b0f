"""A durable index of references by due time: the store's timer facility (docs/store.md#time-index).

A front-end that must act on a stored record at a given time adds ``(due_ms, ref)`` (``ref`` is any
64-bit number, a commit-log offset in practice) and later pops what has fallen due. Pending entries
live on disk, not in memory: time is cut into buckets of ``bucket_ms``, each an append-only file of
20-byte entries (due, ref, CRC-32 of the two), and only the buckets up to the next one ahead are read
into a heap. So millions of pending entries cost millions of disk entries but only the due-soon ones
are objects.

The checkpoint is "delivered through ``(due, ref)``": entries are popped in ``(due, ref)`` order, so
one pair says which entries are done. The caller commits a pair only once its own work for every
entry up to it is durable; after a crash, entries past the checkpoint are popped again. Alongside it
the checkpoint keeps ``indexed``, an opaque position in the caller's source up to which every entry is
known to be in the bucket files, so a caller can re-add what a crash may have lost; ``add`` skips a
reference already in its bucket, which makes re-adding idempotent.

A torn tail (a partial entry or one whose CRC does not match, from a crash mid-write) is cut off when
a bucket is first opened. Buckets wholly before the checkpoint are deleted once it is persisted.
"""

from __future__ import annotations

import bisect
import heapq
import logging
import os
import struct
import zlib
from pathlib import Path

from tidemq.store.documents import read_json, write_json_atomic

log = logging.getLogger(__name__)

_PAIR = struct.Struct(">qq")
_CRC = struct.Struct(">I")
ENTRY_SIZE = _PAIR.size + _CRC.size
_SUFFIX = ".tix"
CHECKPOINT = "checkpoint.json"

Entry = tuple[int, int]


def _encode(due: int, ref: int) -> bytes:
    pair = _PAIR.pack(due, ref)
    return pair + _CRC.pack(zlib.crc32(pair))


def _decode_valid(data: bytes) -> tuple[list[Entry], int]:
    """The entries of a bucket file, and the length of its valid prefix (a torn tail excluded)."""
    entries: list[Entry] = []
    end = len(data) - len(data) % ENTRY_SIZE
    for pos in range(0, end, ENTRY_SIZE):
        pair = data[pos : pos + _PAIR.size]
        (crc,) = _CRC.unpack_from(data, pos + _PAIR.size)
        if zlib.crc32(pair) != crc:
            return entries, pos
        entries.append(_PAIR.unpack(pair))
    return entries, end


class TimeIndex:
    def __init__(self, directory: Path, bucket_ms: int = 10_000) -> None:
        if bucket_ms <= 0:
            raise ValueError("bucket_ms must be positive")
        self.directory = directory
        self.bucket_ms = bucket_ms
        directory.mkdir(parents=True, exist_ok=True)
        state = read_json(directory / CHECKPOINT, {})
        delivered = state.get("delivered", [-1, -1])
        #: Every entry at or before this pair has been delivered (committed by the caller).
        self.delivered: Entry = (int(delivered[0]), int(delivered[1]))
        #: The caller's source position up to which every entry is in the bucket files.
        self.indexed: int = int(state.get("indexed", 0))
        self._buckets: list[int] = sorted(
            int(p.name[: -len(_SUFFIX)]) for p in directory.glob("*" + _SUFFIX) if p.name[0].isdigit()
        )
        self._fds: dict[int, int] = {}
        self._dirty: set[int] = set()
        self._loaded: set[int] = set()
        self._heap: list[Entry] = []
        self._last_popped: Entry = self.delivered
        #: (delivered, indexed) as this process last wrote them to the checkpoint.
        self._written: tuple[Entry, int] | None = None

    # --- files --------------------------------------------------------------------------------------

    def bucket_of(self, due: int) -> int:
        return due - due % self.bucket_ms

    def _path(self, bucket: int) -> Path:
        return self.directory / f"{bucket:015d}{_SUFFIX}"

    def _read(self, bucket: int) -> list[Entry]:
        try:
            data = self._path(bucket).read_bytes()
        except FileNotFoundError:
            return []
        return _decode_valid(data)[0]

    def _fd(self, bucket: int) -> int:
        """The bucket's file open for appending, its torn tail (if any) cut off first."""
        fd = self._fds.get(bucket)
        if fd is None:
            path = self._path(bucket)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            data = os.pread(fd, os.fstat(fd).st_size, 0)
            _, valid = _decode_valid(data)
            if valid < len(data):
                log.warning("time index: %s had a torn tail of %d bytes, cut off", path, len(data) - valid)
                os.ftruncate(fd, valid)
            self._fds[bucket] = fd
            i = bisect.bisect_left(self._buckets, bucket)
            if i == len(self._buckets) or self._buckets[i] != bucket:
                self._buckets.insert(i, bucket)
        return fd

    # --- adding -------------------------------------------------------------------------------------

    def contains(self, due: int, ref: int) -> bool:
        return (due, ref) in self._read(self.bucket_of(due))

    def entries_between(self, first_due: int, last_due: int) -> list[Entry]:
        """Every entry in the bucket files due in ``[first_due, last_due]``, delivered or not, sorted."""
        out: list[Entry] = []
        for bucket in range(self.bucket_of(first_due), last_due + 1, self.bucket_ms):
            out.extend(e for e in self._read(bucket) if first_due <= e[0] <= last_due)
        return sorted(out)

    def add(self, due: int, ref: int, indexed: int | None = None) -> None:
        """Add an entry; ``indexed`` is the caller's source position just past it, if it has one."""
        if (due, ref) <= self._last_popped:
            raise ValueError(
                f"entry ({due}, {ref}) is not after the last popped (checkpoint) {self._last_popped}"
            )
        bucket = self.bucket_of(due)
        os.write(self._fd(bucket), _encode(due, ref))
        self._dirty.add(bucket)
        if bucket in self._loaded:
            heapq.heappush(self._heap, (due, ref))
        if indexed is not None:
            self.indexed = max(self.indexed, indexed)

    def add_missing(self, due: int, ref: int, indexed: int) -> bool:
        """Re-add after a crash: skip an entry already delivered or already in its bucket."""
        if (due, ref) <= self.delivered or self.contains(due, ref):
            self.indexed = max(self.indexed, indexed)
            return False
        self.add(due, ref, indexed)
        return True

    # --- popping ------------------------------------------------------------------------------------

    def _load_through(self, time_ms: int) -> None:
        """Read every bucket that starts at or before the bucket after ``time_ms``'s into the heap."""
        limit = self.bucket_of(time_ms) + self.bucket_ms
        for bucket in self._buckets[: bisect.bisect_right(self._buckets, limit)]:
            if bucket in self._loaded:
                continue
            self._loaded.add(bucket)
            for entry in self._read(bucket):
                if entry > self.delivered:
                    heapq.heappush(self._heap, entry)

    def next_due(self, now_ms: int) -> int | None:
        """When the earliest pending entry falls due (or the next bucket starts), None when empty."""
        self._load_through(now_ms)
        while self._heap and self._heap[0] <= self._last_popped:
            heapq.heappop(self._heap)  # a duplicate of one already popped
        if self._heap:
            return self._heap[0][0]
        i = bisect.bisect_right(self._buckets, self.bucket_of(now_ms) + self.bucket_ms)
        return self._buckets[i] if i < len(self._buckets) else None

    def pop_due(self, now_ms: int, limit: int) -> list[Entry]:
        """Up to ``limit`` entries due at or before ``now_ms``, in ``(due, ref)`` order."""
        self._load_through(now_ms)
        out: list[Entry] = []
        while self._heap and self._heap[0][0] <= now_ms and len(out) < limit:
            entry = heapq.heappop(self._heap)
            if entry > self._last_popped:
                out.append(entry)
                self._last_popped = entry
        return out

    @property
    def popped_through(self) -> Entry:
        """The last entry popped (and not pushed back): an entry added now must come after it."""
        return self._last_popped

    def push_back(self, entries: list[Entry]) -> None:
        """Return popped entries the caller could not handle; they are popped again next."""
        for entry in entries:
            heapq.heappush(self._heap, entry)
        if entries:
            first = min(entries)
            self._last_popped = max(self.delivered, (first[0], first[1] - 1))

    def commit(self, entry: Entry) -> None:
        """Every entry up to ``entry`` is delivered; durable at the next ``flush``."""
        self.delivered = max(self.delivered, entry)
        self._last_popped = max(self._last_popped, entry)

    def restore_delivered(self, entry: Entry) -> None:
        """Adopt a checkpoint the caller kept more exactly (in its own store) than the last flush."""
        if entry > self.delivered:
            self.delivered = entry
            self._last_popped = max(self._last_popped, entry)

    # --- durability ---------------------------------------------------------------------------------

    def flush(self) -> None:
        """fsync the written buckets, then write the checkpoint, then delete buckets it covers. With
        nothing new since the last flush there is nothing to write: an idle index leaves the disk alone."""
        delivered, indexed = self.delivered, self.indexed
        if not self._dirty and self._written == (delivered, indexed):
            return
        for bucket in self._dirty:
            fd = self._fds.get(bucket)
            if fd is not None:
                os.fsync(fd)
        self._dirty.clear()
        write_json_atomic(
            self.directory / CHECKPOINT,
            {"delivered": list(delivered), "indexed": indexed, "bucketMs": self.bucket_ms},
        )
        while self._buckets and self._buckets[0] + self.bucket_ms <= delivered[0]:
            bucket = self._buckets.pop(0)
            fd = self._fds.pop(bucket, None)
            if fd is not None:
                os.close(fd)
            self._loaded.discard(bucket)
            self._path(bucket).unlink(missing_ok=True)
        self._written = (delivered, indexed)  # only now: a failed deletion is tried again next flush

    def pending_buckets(self) -> int:
        return len(self._buckets)

    def close(self) -> None:
        self.flush()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
