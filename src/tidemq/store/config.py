"""Store settings; defaults follow Apache RocketMQ's MessageStoreConfig where it has one."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path


class FlushMode(enum.StrEnum):
    ASYNC = "async"
    SYNC = "sync"


@dataclass(slots=True)
class StoreConfig:
    data_dir: Path
    #: Commit-log segment capacity; segments are sparse files so the capacity costs no disk up front.
    segment_bytes: int = 1024 * 1024 * 1024
    #: Consume-queue file capacity in 20-byte entries (Java: 300 000).
    cq_entries_per_file: int = 300_000
    flush_mode: FlushMode = FlushMode.ASYNC
    #: Async mode: how often dirty commit-log pages are fsynced.
    flush_interval_ms: int = 500
    #: How often consume queues, the key index and the checkpoint are fsynced.
    cq_flush_interval_ms: int = 1000
    #: Retention: whole segments older than this are deleted (Java fileReservedTime, 72 h).
    file_reserved_hours: float = 72.0
    #: Retention by size: past this many bytes of log the oldest segments go (0: no cap).
    retention_bytes: int = 0
    retention_check_interval_s: float = 10.0
    #: Above this share of the disk in use, writes are refused, never fresh data deleted (Java marks the
    #: store disk-full past diskSpaceWarningLevelRatio, 0.90, and sends get SERVICE_NOT_AVAILABLE) ...
    disk_full_ratio: float = 0.90
    #: ... until use falls below this one (Java lets writes in again below diskSpaceCleanForciblyRatio, 0.85).
    disk_writable_ratio: float = 0.85
    #: How often the disk's use is checked (a statvfs call).
    disk_check_interval_s: float = 1.0
    #: Index message keys and UNIQ_KEY ids for lookups by key.
    index_keys: bool = True

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir)
        if self.segment_bytes < 4096:
            raise ValueError("segment_bytes must be at least 4096")
        if not 0 < self.disk_writable_ratio <= self.disk_full_ratio <= 1:
            raise ValueError("need 0 < disk_writable_ratio <= disk_full_ratio <= 1")
