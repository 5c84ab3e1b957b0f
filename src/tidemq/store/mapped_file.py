"""A fixed-capacity file: appended with pwrite, read through a read-only mmap.

Writes go through pwrite rather than the mapping so a full disk raises ENOSPC instead of SIGBUS.
The file is sparse up to its capacity, so readers see zeros past the write position.

A file given ``allocate_ahead`` reserves its blocks (fallocate) that many bytes at a time ahead of the
writes: on ext4 a write into a hole allocates a block per page, which costs several times the copy itself,
so a 100-message batch spent more time there than anywhere else in the broker (docs/performance.md).
Reserving in chunks keeps
the disk use near what is written (unlike allocating whole segments). A file whose reservation fails
(full disk, or a file system that cannot) gives back what the attempt took and writes into holes from
then on, so a full disk is still reported by the write that needs the space.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

#: fallocate errors meaning "this file system cannot": writes then simply fill holes as before.
_UNSUPPORTED = frozenset((errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL))
_NO_ROOM = frozenset((errno.ENOSPC, errno.EDQUOT))


def _libc_fallocate() -> Callable[[int, int, int, int], int] | None:
    """Linux fallocate(2): unlike ``os.posix_fallocate`` it fails where the file system cannot reserve
    blocks, where glibc's posix_fallocate would emulate it with a one-byte write every 4 KiB."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    for name in ("fallocate64", "fallocate"):
        func = getattr(libc, name, None)
        if func is not None:
            func.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
            func.restype = ctypes.c_int
            return func  # type: ignore[no-any-return]
    return None


_FALLOCATE = _libc_fallocate()


def reserve_blocks(fd: int, offset: int, length: int) -> None:
    """Allocate the file's blocks for [offset, offset + length) without writing them (mode 0)."""
    if _FALLOCATE is None:
        raise OSError(errno.EOPNOTSUPP, "fallocate is not available here")
    if _FALLOCATE(fd, 0, offset, length) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


class MappedFile:
    __slots__ = (
        "_allocated",
        "_fd",
        "_mm",
        "allocate_ahead",
        "base",
        "capacity",
        "dirty",
        "path",
        "write_pos",
    )

    def __init__(self, path: Path, base: int, capacity: int, allocate_ahead: int = 0) -> None:
        self.path = path
        self.base = base
        self.capacity = capacity
        self.allocate_ahead = allocate_ahead
        self._allocated = 0  # blocks are reserved below this position (as far as this object knows)
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
        if pos + len(view) > self._allocated and self.allocate_ahead:
            self._allocate(pos, len(view))
        done = 0
        try:
            while done < len(view):
                written = os.pwrite(self._fd, view[done:], pos + done)
                if written <= 0:
                    raise OSError("short write")
                done += written
        except OSError:
            if done:  # a full disk took part of it: leave no half record behind the write position
                self.rollback_to(pos)
            raise
        self.write_pos = pos + len(view)
        self.dirty = True
        return pos

    def _allocate(self, pos: int, size: int) -> None:
        end = min(self.capacity, pos + size + self.allocate_ahead)
        try:
            reserve_blocks(self._fd, pos, end - pos)
        except OSError as exc:
            if exc.errno not in _UNSUPPORTED and exc.errno not in _NO_ROOM:
                raise
            self.allocate_ahead = 0
            if exc.errno in _UNSUPPORTED:
                log.info("%s: the file system cannot reserve blocks (%s); writing into holes", self.path, exc)
            else:
                # A failed reservation may keep part of what it took: give that back, so the consume
                # queues, index and offsets get the space that is left; the write finds out if it fits.
                log.warning("%s: no room to reserve blocks ahead; writing into holes", self.path)
                os.ftruncate(self._fd, pos)
                os.ftruncate(self._fd, self.capacity)
            return
        self._allocated = end

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
        self._allocated = pos

    def rollback_to(self, pos: int) -> None:
        """Take back what was appended from ``pos`` on (a write refused after it reached the file): its
        blocks are freed and it reads as zeros again. Unlike ``truncate_to`` the mapping stays, so
        readers holding it are not disturbed; nothing is fsynced, as nothing of it was acknowledged."""
        os.ftruncate(self._fd, pos)
        os.ftruncate(self._fd, self.capacity)
        self.write_pos = min(self.write_pos, pos)
        self._allocated = min(self._allocated, pos)

    def close(self) -> None:
        self._mm.close()
        os.close(self._fd)

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
