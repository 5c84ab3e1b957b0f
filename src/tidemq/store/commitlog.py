"""The commit log: every message of every queue, appended in stored layout to fixed-size segments.

A record never spans two segments: when one does not fit, an 8-byte blank header marks the rest of
the segment unused and the record starts the next one (Java's END_FILE_MIN_BLANK_LENGTH rule).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tidemq.record.layout import (
    HEAD_SIZE_V4,
    INT32,
    INT64,
    MAGIC_BLANK,
    MAGIC_MESSAGE,
    MIN_RECORD_SIZE,
    POS_BODY_CRC,
    POS_PHYSICAL_OFFSET,
    POS_SYSFLAG,
    SIZE_AND_MAGIC,
    body_crc,
    body_length_pos,
    store_timestamp_pos,
)
from tidemq.store.mapped_file import MappedFile

log = logging.getLogger(__name__)

#: The blank that ends a segment is a record's size and magic alone.
BLANK_HEADER = SIZE_AND_MAGIC.size
#: How far ahead of the writes a segment reserves its blocks (see MappedFile).
ALLOCATE_AHEAD = 4 << 20


@dataclass(slots=True)
class ScannedRecord:
    offset: int
    size: int
    data: bytes


class CommitLog:
    def __init__(self, directory: Path, segment_bytes: int) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        directory.mkdir(parents=True, exist_ok=True)
        self.segments: list[MappedFile] = []
        for path in sorted(directory.iterdir()):
            if path.name.isdigit() and len(path.name) == 20:
                self.segments.append(MappedFile(path, int(path.name), segment_bytes, ALLOCATE_AHEAD))
        self.flushed = 0

    # --- positions ----------------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self.segments[0].base if self.segments else 0

    @property
    def max_offset(self) -> int:
        """Offset the next record gets (end of written data)."""
        return self.segments[-1].end if self.segments else 0

    def segment_at(self, offset: int) -> MappedFile | None:
        if not self.segments or offset < self.segments[0].base:
            return None
        index = (offset - self.segments[0].base) // self.segment_bytes
        if index >= len(self.segments):
            return None
        seg = self.segments[index]
        return seg if seg.base <= offset < seg.base + self.segment_bytes else None

    # --- writing ------------------------------------------------------------------------------------

    def reserve(self, size: int) -> MappedFile:
        """Return the segment the next ``size`` bytes go to, rolling over when they do not fit."""
        if size + BLANK_HEADER > self.segment_bytes:
            raise ValueError(f"a write of {size} bytes cannot fit a {self.segment_bytes}-byte segment")
        seg = self.segments[-1] if self.segments else None
        if seg is None:
            return self._new_segment(0)
        if seg.free < size + BLANK_HEADER:
            seg.append(SIZE_AND_MAGIC.pack(seg.free, MAGIC_BLANK))
            seg.write_pos = seg.capacity
            return self._new_segment(seg.base + seg.capacity)
        return seg

    def _new_segment(self, base: int) -> MappedFile:
        seg = MappedFile(self.directory / MappedFile.name_for(base), base, self.segment_bytes, ALLOCATE_AHEAD)
        self.segments.append(seg)
        return seg

    # --- reading ------------------------------------------------------------------------------------

    def read(self, offset: int, size: int) -> bytes | None:
        seg = self.segment_at(offset)
        if seg is None or offset + size > seg.end:
            return None
        return seg.read(offset - seg.base, size)

    def read_record(self, offset: int) -> bytes | None:
        seg = self.segment_at(offset)
        if seg is None or offset + BLANK_HEADER > seg.end:
            return None
        pos = offset - seg.base
        size, magic = SIZE_AND_MAGIC.unpack_from(seg.view, pos)
        if magic != MAGIC_MESSAGE or size <= 0 or pos + size > seg.write_pos:
            return None
        return seg.read(pos, size)

    def store_timestamp(self, offset: int) -> int:
        seg = self.segment_at(offset)
        if seg is None or offset + HEAD_SIZE_V4 > seg.end:
            return -1
        pos = offset - seg.base
        (sys_flag,) = INT32.unpack_from(seg.view, pos + POS_SYSFLAG)
        (ts,) = INT64.unpack_from(seg.view, pos + store_timestamp_pos(sys_flag))
        return int(ts)

    # --- recovery -----------------------------------------------------------------------------------

    def recover(self, trusted_until: int) -> Iterator[ScannedRecord]:
        """Validate records from ``trusted_until`` to the end, yielding each good one.

        The first record that fails (size, magic, own offset, body CRC) and everything after it is
        cut off: that is a write torn by a crash, never acknowledged in sync mode.
        """
        if not self.segments:
            return
        start = max(trusted_until, self.min_offset)
        seg_index = max(0, (start - self.min_offset) // self.segment_bytes)
        if seg_index >= len(self.segments):
            seg_index, start = len(self.segments) - 1, self.segments[-1].base
        for seg in self.segments[:seg_index]:
            seg.write_pos = seg.capacity
        offset = start
        while seg_index < len(self.segments):
            seg = self.segments[seg_index]
            pos = offset - seg.base
            view = memoryview(seg.view)
            while True:
                if seg.capacity - pos < BLANK_HEADER:
                    end_of_segment = True
                    break
                size, magic = SIZE_AND_MAGIC.unpack_from(view, pos)
                if magic == MAGIC_BLANK and size == seg.capacity - pos:
                    end_of_segment = True
                    break
                if not self._valid(view, pos, size, magic, seg.base + pos):
                    end_of_segment = False
                    break
                yield ScannedRecord(seg.base + pos, size, seg.read(pos, size))
                pos += size
            view.release()
            if end_of_segment and seg_index + 1 < len(self.segments):
                seg.write_pos = seg.capacity
                seg_index += 1
                offset = self.segments[seg_index].base
                continue
            self._cut(seg_index, pos)
            return

    @staticmethod
    def _valid(view: memoryview, pos: int, size: int, magic: int, offset: int) -> bool:
        if magic != MAGIC_MESSAGE or size < MIN_RECORD_SIZE or pos + size > len(view):
            return False
        (phys,) = INT64.unpack_from(view, pos + POS_PHYSICAL_OFFSET)
        if phys != offset:
            return False
        (sys_flag,) = INT32.unpack_from(view, pos + POS_SYSFLAG)
        body_len_pos = body_length_pos(sys_flag)
        if body_len_pos + INT32.size > size:
            return False
        (body_len,) = INT32.unpack_from(view, pos + body_len_pos)
        start = pos + body_len_pos + INT32.size
        if body_len < 0 or start + body_len > pos + size:
            return False
        (crc,) = INT32.unpack_from(view, pos + POS_BODY_CRC)
        return bool(body_crc(view[start : start + body_len]) == crc)

    def _cut(self, seg_index: int, pos: int) -> None:
        seg = self.segments[seg_index]
        if any(seg.view[pos : min(seg.capacity, pos + BLANK_HEADER)]):
            log.warning("commit log: cutting a torn record at offset %d", seg.base + pos)
        seg.truncate_to(pos)
        for extra in self.segments[seg_index + 1 :]:
            log.warning("commit log: dropping segment %s past the torn record", extra.path.name)
            extra.destroy()
        del self.segments[seg_index + 1 :]

    # --- durability and retention -------------------------------------------------------------------

    def dirty_segments(self) -> list[MappedFile]:
        return [seg for seg in self.segments if seg.dirty]

    def delete_expired(self, max_age_s: float, max_bytes: int = 0) -> int:
        """Delete whole segments older than ``max_age_s``, and the oldest while the log holds more than
        ``max_bytes`` (0: no cap). The active segment always stays. Returns how many were deleted."""
        deleted = 0
        now = time.time()
        held = sum(seg.write_pos for seg in self.segments)
        while len(self.segments) > 1:
            seg = self.segments[0]
            age = now - seg.path.stat().st_mtime
            over_cap = 0 < max_bytes < held
            if age < max_age_s and not over_cap:
                break
            log.info(
                "retention: deleting commit-log segment %s (age %.0fs, log %d bytes)",
                seg.path.name,
                age,
                held,
            )
            held -= seg.write_pos
            seg.destroy()
            self.segments.pop(0)
            deleted += 1
        return deleted

    def close(self) -> None:
        for seg in self.segments:
            seg.close()
        self.segments.clear()
