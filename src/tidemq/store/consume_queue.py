"""Consume queue: per (topic, queue id), fixed 20-byte entries pointing into the commit log.

Entry = commit-log offset (int64), record size (int32), tag hash code (int64). The entry index is the
queue offset clients see, so offsets are dense and start at 0.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from pathlib import Path

from tidemq.store.mapped_file import MappedFile

log = logging.getLogger(__name__)

ENTRY = struct.Struct(">qiq")
ENTRY_SIZE = ENTRY.size  # 20


class ConsumeQueue:
    def __init__(self, directory: Path, topic: str, queue_id: int, entries_per_file: int) -> None:
        self.directory = directory
        self.topic = topic
        self.queue_id = queue_id
        self.entries_per_file = entries_per_file
        self.file_bytes = entries_per_file * ENTRY_SIZE
        self.files: list[MappedFile] = []
        if directory.is_dir():
            for path in sorted(directory.iterdir()):
                if path.name.isdigit() and len(path.name) == 20:
                    self.files.append(MappedFile(path, int(path.name), self.file_bytes))
        self.min_offset = self.files[0].base // ENTRY_SIZE if self.files else 0
        self.max_offset = 0
        #: Record bytes appended since the process started (``rocketmq_throughput_in_total``).
        self.bytes_in = 0
        self._recover_end()

    def _recover_end(self) -> None:
        """Find the first empty slot: entries are written in order and a real entry has size > 0."""
        for mf in self.files[:-1]:
            mf.write_pos = mf.capacity
        if not self.files:
            return
        last = self.files[-1]
        lo, hi = 0, self.entries_per_file
        while lo < hi:
            mid = (lo + hi) // 2
            _, size, _ = ENTRY.unpack_from(last.view, mid * ENTRY_SIZE)
            if size > 0:
                lo = mid + 1
            else:
                hi = mid
        last.write_pos = lo * ENTRY_SIZE
        self.max_offset = (last.base + last.write_pos) // ENTRY_SIZE

    def truncate_past(self, log_end: int) -> None:
        """Drop trailing entries that point beyond the recovered end of the commit log."""
        new_max = self.max_offset
        while new_max > self.min_offset:
            entry = self.entry(new_max - 1)
            if entry is None or entry[0] + entry[1] <= log_end:
                break
            new_max -= 1
        if new_max == self.max_offset:
            return
        log.warning(
            "consume queue %s-%d: dropping entries %d..%d past the log end",
            self.topic,
            self.queue_id,
            new_max,
            self.max_offset - 1,
        )
        byte_end = new_max * ENTRY_SIZE
        while self.files and self.files[-1].base > byte_end:
            self.files.pop().destroy()
        if self.files:
            last = self.files[-1]
            if byte_end - last.base < last.capacity:
                last.truncate_to(byte_end - last.base)
        self.max_offset = new_max

    def rollback_to(self, max_offset: int) -> None:
        """Take back entries from ``max_offset`` on, appended for a write the store then refused, so the
        offsets are handed out again only to the record that is really stored there."""
        if max_offset >= self.max_offset:
            return
        byte_end = max_offset * ENTRY_SIZE
        while len(self.files) > 1 and self.files[-1].base >= byte_end:
            self.files.pop().destroy()
        if self.files:
            last = self.files[-1]
            last.rollback_to(max(0, byte_end - last.base))
        self.max_offset = max_offset

    def append(self, phys: int, size: int, tags_code: int) -> int:
        offset = self.max_offset
        self._writable_file().append(ENTRY.pack(phys, size, tags_code))
        self.max_offset = offset + 1
        return offset

    def append_many(self, phys: list[int], sizes: list[int], tags_codes: list[int]) -> None:
        """Append entries for records stored back to back, one write per file they land in."""
        if len(phys) == 1:  # a single send or PUB, the common case: one entry packed straight
            self.append(phys[0], sizes[0], tags_codes[0])
            return
        done = 0
        while done < len(phys):
            mf = self._writable_file()
            room = (mf.capacity - mf.write_pos) // ENTRY_SIZE
            upto = min(len(phys), done + room)
            mf.append(b"".join(map(ENTRY.pack, phys[done:upto], sizes[done:upto], tags_codes[done:upto])))
            self.max_offset += upto - done
            done = upto

    def _writable_file(self) -> MappedFile:
        byte_pos = self.max_offset * ENTRY_SIZE
        mf = self.files[-1] if self.files else None
        if mf is None or byte_pos >= mf.base + mf.capacity:
            base = byte_pos - byte_pos % self.file_bytes
            self.directory.mkdir(parents=True, exist_ok=True)
            mf = MappedFile(self.directory / MappedFile.name_for(base), base, self.file_bytes)
            mf.write_pos = byte_pos - base
            if not self.files:
                self.min_offset = self.max_offset
            self.files.append(mf)
        return mf

    def _file_for(self, offset: int) -> MappedFile | None:
        if not self.files or offset < self.min_offset or offset >= self.max_offset:
            return None
        index = (offset * ENTRY_SIZE - self.files[0].base) // self.file_bytes
        return self.files[index] if 0 <= index < len(self.files) else None

    def entry(self, offset: int) -> tuple[int, int, int] | None:
        mf = self._file_for(offset)
        if mf is None:
            return None
        phys, size, tags = ENTRY.unpack_from(mf.view, offset * ENTRY_SIZE - mf.base)
        return int(phys), int(size), int(tags)

    def entries(self, offset: int, count: int) -> list[tuple[int, int, int]]:
        """Up to ``count`` entries from ``offset``, not crossing a file boundary (as Java reads)."""
        mf = self._file_for(offset)
        if mf is None:
            return []
        rel = offset * ENTRY_SIZE - mf.base
        end_rel = min(mf.write_pos, rel + count * ENTRY_SIZE)
        return list(ENTRY.iter_unpack(mf.read(rel, end_rel - rel)))

    def last_entry_end(self) -> int:
        entry = self.entry(self.max_offset - 1) if self.max_offset > self.min_offset else None
        return entry[0] + entry[1] if entry else -1

    def bisect(self, key: Callable[[int], int], target: int) -> int:
        """First offset whose ``key(commit-log offset)`` is >= target (entries are in log order)."""
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            entry = self.entry(mid)
            if entry is not None and key(entry[0]) < target:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def correct_min_offset(self, log_min: int) -> None:
        """After commit-log retention: skip entries whose records are gone and drop whole dead files."""
        self.min_offset = max(self.min_offset, self.bisect(lambda phys: phys, log_min))
        while len(self.files) > 1:
            first = self.files[0]
            if (first.base + first.capacity) // ENTRY_SIZE <= self.min_offset:
                self.files.pop(0).destroy()
            else:
                break

    def dirty_files(self) -> list[MappedFile]:
        return [mf for mf in self.files if mf.dirty]

    def destroy(self) -> None:
        for mf in self.files:
            mf.destroy()
        self.files.clear()
        self.min_offset = self.max_offset = 0

    def close(self) -> None:
        for mf in self.files:
            mf.close()
        self.files.clear()
