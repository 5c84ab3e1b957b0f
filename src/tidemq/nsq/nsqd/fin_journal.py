"""The FIN journal: what consumers finished since the last snapshot of channel state.

nsqd's channel state (``nsqd.json``: cursors and unfinished offsets) is written once a second; a FIN made
since lives only in memory, and a crash would deliver that message again. So every run of FINs is also
appended here, as one record, and written out by group commit like the commit log's fsyncs:

* sync flush: the journal is fsynced as soon as a FIN is waiting (FINs that arrive during an fsync share
  the next one), and a connection writes nothing it sends after a FIN until that FIN is durable;
* async flush: written every 50 ms (then it survives a SIGKILL) and fsynced every flush interval
  (then it survives power loss).

A record is the channel's journal id and the finished log offsets; applying one is idempotent and order
does not matter, so a record may land in any file from the one current when it was made. A snapshot names
the file from which the journal must be replayed over it; older files are deleted once it is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from tidemq.aio import finish_in_thread, wait_or_timeout
from tidemq.store.documents import fsync_directory

log = logging.getLogger(__name__)

#: Record header: body length, CRC-32 of the body. The body: channel id (8 bytes), then the offsets.
_HEADER = struct.Struct(">II")
_ID = struct.Struct(">Q")
#: With async flush, how often the journal is written (so FINs older than this survive a SIGKILL).
ASYNC_WRITE_INTERVAL_S = 0.05
#: A snapshot starts a new file once the current one holds this much.
ROTATE_BYTES = 1 << 20
#: After a failed write, how long before the next attempt.
RETRY_DELAY_S = 0.1
_SUFFIX = ".finlog"


class FinWaiter(Protocol):
    """A connection whose output waits for its FINs to be durable."""

    def fins_durable(self, durable: int) -> bool:
        """The journal is durable up to ``durable``: write what that allows; True once nothing waits."""


def channel_key(journal_id: int) -> bytes:
    return _ID.pack(journal_id)


class FinJournal:
    def __init__(self, directory: Path, generation: int, *, sync: bool, fsync_interval_s: float) -> None:
        self.directory = directory
        #: The file new records go to (a snapshot taken now would name it).
        self.generation = generation
        self.sync = sync
        self.fsync_interval_s = fsync_interval_s
        #: Bytes appended since start, across files: a FIN's position is the total after its record.
        self.appended = 0
        #: How far the appended bytes are fsynced.
        self.durable = 0
        #: Why the last write failed, for nsqd's health; cleared by the next good one.
        self.error = ""
        self.waiters: set[FinWaiter] = set()
        self._buffer = bytearray()
        self._written = 0  # how far appended bytes are written (not necessarily fsynced)
        self._in_file = 0  # bytes in the current file
        self._fd: int | None = None
        self._fd_generation = -1
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    # --- appending (on the loop) -----------------------------------------------------------------------

    def append(self, key: bytes, offsets: list[int]) -> int:
        """Record that the channel with ``key`` finished ``offsets``; returns the position that, once
        durable, makes them so."""
        body = key + struct.pack(f">{len(offsets)}Q", *offsets)
        buffer = self._buffer
        buffer += _HEADER.pack(len(body), zlib.crc32(body))
        buffer += body
        self.appended += _HEADER.size + len(body)
        if self.sync:
            self._wakeup.set()
        return self.appended

    def rotate_if_large(self) -> int:
        """A snapshot is being taken: the generation it names (a new file once the current one is large,
        so the journal does not grow without end)."""
        if self._in_file + len(self._buffer) >= ROTATE_BYTES:
            self.rotate()
        return self.generation

    def rotate(self) -> int:
        """Send the records from here on to a new file; returns its generation."""
        self.generation += 1
        return self.generation

    def drop_before(self, generation: int) -> None:
        """A snapshot naming ``generation`` is written: the files before it are covered by it."""
        for number, path in journal_files(self.directory):
            if number < generation:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()

    # --- writing (group commit) ---------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_fsync = loop.time() + self.fsync_interval_s
        while not self._stopping:
            await wait_or_timeout(self._wakeup, None if self.sync else ASYNC_WRITE_INTERVAL_S)
            self._wakeup.clear()
            fsync = self.sync or self._stopping or loop.time() >= next_fsync
            if not await self.flush(fsync=fsync):
                await asyncio.sleep(RETRY_DELAY_S)
                continue
            if fsync:
                next_fsync = loop.time() + self.fsync_interval_s

    async def stop(self) -> None:
        """Write and fsync what is left (connections waiting on it get their output), then stop."""
        self._stopping = True
        self._wakeup.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self.flush(fsync=True)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    async def flush(self, *, fsync: bool) -> bool:
        """Write what was appended (and fsync, if asked) on a worker thread; False if that failed."""
        if not self._buffer and (not fsync or self.durable == self._written):
            return True
        data, self._buffer = bytes(self._buffer), bytearray()
        end = self.appended
        generation = self.generation
        try:
            await finish_in_thread(self._write, data, generation, fsync)
        except OSError as exc:
            self.error = f"FIN journal write failed: {exc}"
            log.error("nsqd: %s", self.error)
            self._buffer[:0] = data  # written again, whole, to a new file: a torn record ends the old one
            self.generation += 1
            return False
        self.error = ""
        self._written = end
        if fsync:
            self.durable = end
            for waiter in list(self.waiters):
                if waiter.fins_durable(end):
                    self.waiters.discard(waiter)
        return True

    def _write(self, data: bytes, generation: int, fsync: bool) -> None:
        """On a worker thread; only one runs at a time (the flusher's rounds, then ``stop``)."""
        if self._fd is not None and self._fd_generation != generation:
            fd, self._fd = self._fd, None
            try:
                os.fsync(fd)  # what async rounds wrote to it without an fsync
            finally:
                os.close(fd)
        if self._fd is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            path = journal_path(self.directory, generation)
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            self._fd_generation = generation
            self._in_file = os.fstat(self._fd).st_size
            fsync_directory(self.directory)  # the new file's name must survive power loss too
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        self._in_file += len(data)
        if fsync:
            os.fsync(self._fd)


def journal_path(directory: Path, generation: int) -> Path:
    return directory / f"{generation:010d}{_SUFFIX}"


def journal_files(directory: Path) -> list[tuple[int, Path]]:
    """The journal's files, oldest first."""
    found = []
    with contextlib.suppress(FileNotFoundError):
        for path in directory.iterdir():
            if path.suffix == _SUFFIX and path.stem.isdigit():
                found.append((int(path.stem), path))
    return sorted(found)


def replay(directory: Path, from_generation: int) -> Iterator[tuple[bytes, tuple[int, ...]]]:
    """(channel key, finished offsets) of each whole record in the files from ``from_generation`` on. A
    file ends at its first torn or corrupt record (the tail a crash cut short)."""
    for number, path in journal_files(directory):
        if number < from_generation:
            continue
        data = path.read_bytes()
        pos = 0
        while pos + _HEADER.size <= len(data):
            size, crc = _HEADER.unpack_from(data, pos)
            body = data[pos + _HEADER.size : pos + _HEADER.size + size]
            if len(body) != size or size < _ID.size or (size - _ID.size) % 8 or zlib.crc32(body) != crc:
                log.warning("nsqd: FIN journal %s ends in a torn record at byte %d", path.name, pos)
                break
            count = (size - _ID.size) // 8
            yield body[: _ID.size], struct.unpack_from(f">{count}Q", body, _ID.size)
            pos += _HEADER.size + size
