"""A fixed-capacity file: appended with pwrite, read through a read-only mmap.

Writes go through pwrite rather than the mapping so a full disk raises ENOSPC instead of SIGBUS.
The file is sparse up to its capacity, so readers see zeros past the write position.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path


class MappedFile:
    __slots__ = ("_fd", "_mm", "base", "capacity", "dirty", "path", "write_pos")

    def __init__(self, path: Path, base: int, capacity: int) -> None:
        self.path = path
        self.base = base
        self.capacity = capacity
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(self._fd).st_size != capacity:
            os.ftruncate(self._fd, capacity)
        self._mm = mmap.mmap(self._fd, capacity, access=mmap.ACCESS_READ)
        self.write_pos = 0
        self.dirty = False

    @staticmethod
    def name_for(offset: int) -> str:
        return f"{offset:020d}"

    @property
    def end(self) -> int:
        """Absolute offset just past the last written byte."""
        return self.base + self.write_pos

    @property
    def free(self) -> int:
        return self.capacity - self.write_pos

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write at the current position and return that position (relative to this file)."""
        pos = self.write_pos
        view = memoryview(data)
        done = 0
        while done < len(view):
            written = os.pwrite(self._fd, view[done:], pos + done)
            if written <= 0:
                raise OSError("short write")
            done += written
        self.write_pos = pos + len(view)
        self.dirty = True
        return pos

    def read(self, pos: int, size: int) -> bytes:
        return self._mm[pos : pos + size]

    @property
    def view(self) -> mmap.mmap:
        return self._mm

    def fileno(self) -> int:
        return self._fd

    def sync(self) -> None:
        os.fsync(self._fd)

    def truncate_to(self, pos: int) -> None:
        """Forget everything from ``pos`` on: the bytes are zeroed so a later scan cannot see them."""
        self._mm.close()
        os.ftruncate(self._fd, pos)
        os.ftruncate(self._fd, self.capacity)
        os.fsync(self._fd)
        self._mm = mmap.mmap(self._fd, self.capacity, access=mmap.ACCESS_READ)
        self.write_pos = pos

    def close(self) -> None:
        self._mm.close()
        os.close(self._fd)

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
