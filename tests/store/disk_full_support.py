"""A small tmpfs the test mounts (root only), to fill for real: the store meets true ENOSPC errors."""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

_MNT_DETACH = 2


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


@contextmanager
def small_filesystem(where: Path, size: str) -> Iterator[Path]:
    """Mount a ``size`` tmpfs at ``where`` (mount(2), no subprocess); skip the test where not permitted."""
    where.mkdir(parents=True, exist_ok=True)
    libc = _libc()
    opts = f"size={size}".encode()
    if libc.mount(b"tmpfs", str(where).encode(), b"tmpfs", 0, opts) != 0:
        code = ctypes.get_errno()
        pytest.skip(f"disk-full tests need to mount a small tmpfs (root in a container): {os.strerror(code)}")
    try:
        yield where
    finally:
        libc.umount2(str(where).encode(), _MNT_DETACH)


def fill(where: Path) -> Path:
    """Write a file until the file system is full; return it (unlink it to free the space)."""
    filler = where / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for chunk in (1 << 20, 4096, 1):
            data = b"\xff" * chunk
            while True:
                try:
                    os.write(fd, data)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
    finally:
        os.close(fd)
    return filler
