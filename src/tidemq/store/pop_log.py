"""The pop state's log: every receive, ack, invisible-time change and position move, one record each.

Records are written with ``write(2)`` before the call that makes them returns, so a killed process loses
none; fsync follows the store's flush mode (the caller awaits :meth:`PopLog.sync` where an answer must
wait for the disk; concurrent waiters share one fsync). A frame is a CRC-32 and a length, then the
payload; replay stops at the first torn or corrupt frame and the file is cut there.

Compaction rewrites the log as the records that rebuild the live state only (the keys, each queue's
position, the messages in flight), into ``pop.log.tmp``, fsynced and renamed over ``pop.log``: a crash
leaves the old log or the new one. Acked messages leave no trace beyond the position, so the rewritten
log, and recovery time, grow with what is in flight, not with what was ever consumed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

LOG_NAME = "pop.log"
_FRAME = struct.Struct(">IH")
_KEY = struct.Struct(">Ii")
_POSITION = struct.Struct(">Iq")
_LEASE = struct.Struct(">IqqqI")
_ACK = struct.Struct(">Iq")
_SERIAL = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class KeyRecord:
    key_id: int
    group: str
    topic: str
    queue_id: int


@dataclass(frozen=True, slots=True)
class PositionRecord:
    """Every offset below ``position`` was handed out or passed over."""

    key_id: int
    position: int


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The message at ``offset`` is in flight under ``serial`` until ``visible_at`` (delivery ``attempt``)."""

    key_id: int
    offset: int
    serial: int
    visible_at: int
    attempt: int


@dataclass(frozen=True, slots=True)
class AckRecord:
    key_id: int
    offset: int


@dataclass(frozen=True, slots=True)
class SerialRecord:
    """The highest lease serial issued, kept across a compaction that drops every lease."""

    serial: int


Record = KeyRecord | PositionRecord | LeaseRecord | AckRecord | SerialRecord


def encode(record: Record) -> bytes:
    match record:
        case LeaseRecord(key_id, offset, serial, visible_at, attempt):
            payload = b"L" + _LEASE.pack(key_id, offset, serial, visible_at, attempt)
        case AckRecord(key_id, offset):
            payload = b"A" + _ACK.pack(key_id, offset)
        case PositionRecord(key_id, position):
            payload = b"P" + _POSITION.pack(key_id, position)
        case KeyRecord(key_id, group, topic, queue_id):
            payload = b"K" + _KEY.pack(key_id, queue_id) + f"{group}\0{topic}".encode()
        case SerialRecord(serial):
            payload = b"S" + _SERIAL.pack(serial)
    return _FRAME.pack(zlib.crc32(payload), len(payload)) + payload


def _decode_payload(payload: bytes) -> Record:
    kind, body = payload[:1], payload[1:]
    if kind == b"L":
        return LeaseRecord(*_LEASE.unpack(body))
    if kind == b"A":
        return AckRecord(*_ACK.unpack(body))
    if kind == b"P":
        return PositionRecord(*_POSITION.unpack(body))
    if kind == b"K":
        key_id, queue_id = _KEY.unpack_from(body)
        group, topic = body[_KEY.size :].decode().split("\0")
        return KeyRecord(key_id, group, topic, queue_id)
    if kind == b"S":
        return SerialRecord(*_SERIAL.unpack(body))
    raise ValueError(f"unknown record kind {kind!r}")


def decode_valid(data: bytes) -> tuple[list[Record], int]:
    """The records of a log, and the length of its valid prefix (a torn or corrupt tail excluded)."""
    records: list[Record] = []
    pos = 0
    while pos + _FRAME.size <= len(data):
        crc, size = _FRAME.unpack_from(data, pos)
        payload = data[pos + _FRAME.size : pos + _FRAME.size + size]
        if len(payload) < size or zlib.crc32(payload) != crc:
            break
        try:
            records.append(_decode_payload(payload))
        except (ValueError, struct.error, UnicodeDecodeError):
            break
        pos += _FRAME.size + size
    return records, pos


class PopLog:
    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.path = directory / LOG_NAME
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        #: Bytes in the current file, for the compaction trigger.
        self.size = 0
        #: Bytes ever written and ever fsynced (monotonic across compactions), for group commit.
        self._written = 0
        self._synced = 0
        self._lock = asyncio.Lock()

    def replay(self) -> Iterator[Record]:
        """The log's records; a torn tail is cut off first so later appends follow a valid frame."""
        data = os.pread(self._fd, os.fstat(self._fd).st_size, 0)
        records, valid = decode_valid(data)
        if valid < len(data):
            log.warning("pop log: %s had a torn tail of %d bytes, cut off", self.path, len(data) - valid)
            os.ftruncate(self._fd, valid)
        self.size = valid
        return iter(records)

    def append(self, records: Iterable[Record]) -> None:
        data = b"".join(encode(r) for r in records)
        if data:
            os.write(self._fd, data)
            self.size += len(data)
            self._written += len(data)

    @property
    def dirty(self) -> bool:
        return self._synced < self._written

    async def sync(self) -> None:
        """Return once everything appended before the call is on disk; waiters share one fsync."""
        target = self._written
        async with self._lock:
            if self._synced >= target:
                return
            upto = self._written
            job = asyncio.get_running_loop().run_in_executor(None, os.fsync, self._fd)
            try:
                await asyncio.shield(job)
            except asyncio.CancelledError:
                # The descriptor must stay open until the thread is done with it.
                await asyncio.wait([job])
                raise
            self._synced = max(self._synced, upto)

    async def rewrite(self, snapshot: Callable[[], Iterable[Record]]) -> None:
        """Replace the log by ``snapshot()`` (the live state), atomically and durably. The snapshot is
        taken once no fsync is running and written without yielding, so no append falls between."""
        async with self._lock:
            tmp = self.directory / (LOG_NAME + ".tmp")
            data = b"".join(encode(r) for r in snapshot())
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            old, self._fd = self._fd, os.open(self.path, os.O_RDWR | os.O_APPEND)
            os.close(old)
            self.size = len(data)
            self._synced = self._written

    def close(self) -> None:
        os.fsync(self._fd)
        os.close(self._fd)
