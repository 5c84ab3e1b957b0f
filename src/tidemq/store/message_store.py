"""MessageStore: the one object front-ends talk to. Appends, reads, flushing, recovery, retention.

All methods run on the event loop thread; fsyncs go to worker threads (store/flush.py), so concurrent
senders in sync mode share one fsync (group commit).
"""

from __future__ import annotations

import asyncio
import bisect
import errno
import fcntl
import itertools
import logging
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tidemq.aio import cancel_and_wait
from tidemq.record import StoredBatch, decode_record, record_properties
from tidemq.record.layout import POS_QUEUE_OFFSET, QUEUE_AND_PHYSICAL_OFFSETS
from tidemq.store import batch_append
from tidemq.store.batch_append import QueueHold, pack_offsets
from tidemq.store.commitlog import CommitLog
from tidemq.store.config import StoreConfig
from tidemq.store.consume_queue import ConsumeQueue
from tidemq.store.disk_guard import DiskGuard
from tidemq.store.documents import Documents, read_json
from tidemq.store.flush import DurableCallback, Flusher
from tidemq.store.key_index import KeyIndex
from tidemq.store.mapped_file import MappedFile
from tidemq.store.requests import (
    AppendRequest,
    GetResult,
    GetStatus,
    PutResult,
    StoreError,
    TagsCodeFn,
    default_tags_code,
    record_keys,
)

log = logging.getLogger(__name__)

MAX_TRANSFER_BYTES = 256 * 1024
MAX_TRANSFER_COUNT = 32

DispatchListener = Callable[[str, int, int, int], None]
TopicDeletedListener = Callable[[str], None]


class MessageStore:
    def __init__(self, config: StoreConfig, tags_code_fn: TagsCodeFn = default_tags_code) -> None:
        self.config = config
        self.tags_code_fn = tags_code_fn
        root = config.data_dir
        self._lock_fd = self._lock_data_dir(root)
        self.commitlog = CommitLog(root / "commitlog", config.segment_bytes)
        self.index = KeyIndex(root / "index" / "keys2.idx") if config.index_keys else None
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        #: Each topic's queue ids, so a topic's queues are found without scanning every queue (a delete of
        #: each of N topics would be O(N^2) otherwise).
        self._queue_ids: dict[str, set[int]] = {}
        self._checkpoint_path = root / "checkpoint.json"
        self.dispatch_listeners: list[DispatchListener] = []
        #: Called with a topic's name when it is deleted, so front-ends forget their state of it.
        self.topic_deleted_listeners: list[TopicDeletedListener] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        #: How long start-up recovery took (``/metrics``).
        self.recovery_seconds = 0.0
        #: Queues held by a big batch being stored in steps (store/batch_append.py).
        self.holds: dict[tuple[str, int], QueueHold] = {}
        self.flusher = Flusher(
            config, self.commitlog, self._queues, self.index, self.holds, self._checkpoint_path
        )
        self.disk = DiskGuard(root, config.disk_full_ratio, config.disk_writable_ratio)
        self._recover()

    # --- start-up ----------------------------------------------------------------------------------

    @staticmethod
    def _lock_data_dir(root: Path) -> int:
        try:
            root.mkdir(parents=True, exist_ok=True)
            fd = os.open(root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"data dir {root} is not writable: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StoreError(f"data dir {root} is in use by another tidemq process") from None
        return fd

    def _load_queues(self) -> None:
        cq_root = self.config.data_dir / "consumequeue"
        if not cq_root.is_dir():
            return
        for topic_dir in cq_root.iterdir():
            for queue_dir in topic_dir.iterdir():
                if queue_dir.name.isdigit():
                    cq = ConsumeQueue(
                        queue_dir, topic_dir.name, int(queue_dir.name), self.config.cq_entries_per_file
                    )
                    self._add_queue(cq)

    def _recover(self) -> None:
        started = time.monotonic()
        self._load_queues()
        checkpoint = read_json(self._checkpoint_path, {})
        trusted = int(checkpoint.get("dispatched", 0))
        redispatched = 0
        for rec in self.commitlog.recover(trusted):
            msg = decode_record(rec.data, decompress=False)
            # The index is caught up on its own terms: after a SIGKILL a consume queue's entries
            # survive in the page cache while the index's pending entries, written only at a flush,
            # do not (``add`` skips what the index file already covers).
            if self.index is not None:
                self.index.add(msg.topic, record_keys(msg.properties), rec.offset)
            cq = self._queue(msg.topic, msg.queue_id)
            if msg.queue_offset < cq.max_offset:
                continue
            tags = self.tags_code_fn(msg.topic, msg.queue_id, msg.properties, msg.store_timestamp)
            cq.max_offset = msg.queue_offset  # a gap cannot arise from a single ordered log
            cq.append(rec.offset, rec.size, tags)
            redispatched += 1
        log_end = self.commitlog.max_offset
        self.commitlog.flushed = log_end
        if self.index is not None:
            self.index.forget_from(log_end)
        for cq in self._queues.values():
            cq.truncate_past(log_end)
            cq.correct_min_offset(self.commitlog.min_offset)
        self.recovery_seconds = time.monotonic() - started
        log.info(
            "store recovered in %.2fs: log %d..%d, %d queues, %d records re-dispatched",
            self.recovery_seconds,
            self.commitlog.min_offset,
            log_end,
            len(self._queues),
            redispatched,
        )

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self.flusher.commitlog_loop()),
            asyncio.create_task(self.flusher.queues_loop()),
            asyncio.create_task(self._retention_loop()),
            asyncio.create_task(self.disk.watch(self.config.disk_check_interval_s)),
        ]

    def documents(self, folder: str) -> Documents:
        """A front-end's durable JSON documents, in ``folder`` of the data dir (the broker's ``config``)."""
        return Documents(self.config.data_dir / folder)

    # --- queues -------------------------------------------------------------------------------------

    def _queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            directory = self.config.data_dir / "consumequeue" / topic / str(queue_id)
            cq = ConsumeQueue(directory, topic, queue_id, self.config.cq_entries_per_file)
            self._add_queue(cq)
        return cq

    def _add_queue(self, cq: ConsumeQueue) -> None:
        self._queues[(cq.topic, cq.queue_id)] = cq
        self._queue_ids.setdefault(cq.topic, set()).add(cq.queue_id)

    def find_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    def topic_names(self) -> set[str]:
        return set(self._queue_ids)

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(self._queue_ids.get(topic, ()))

    def max_offset(self, topic: str, queue_id: int) -> int:
        cq = self._queues.get((topic, queue_id))
        return cq.max_offset if cq else 0

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self._queues.get((topic, queue_id))
        return cq.min_offset if cq else 0

    # --- writing ------------------------------------------------------------------------------------

    def _reserve(self, size: int) -> MappedFile:
        if self._closed:
            raise StoreError("store is shut down")
        if self.disk.full:
            raise StoreError(self.disk.refusal())
        try:
            return self.commitlog.reserve(size)
        except OSError as exc:
            raise self._write_failure(exc) from None

    def _write(self, seg: MappedFile, data: bytes | bytearray) -> None:
        try:
            seg.append(data)
        except OSError as exc:
            raise self._write_failure(exc) from None

    def put(self, requests: Sequence[AppendRequest]) -> PutResult:
        """Append records back to back in one write; all or none are stored."""
        if len(requests) == 1:
            return self._put_one(requests[0])
        seg = self._reserve(sum(len(r.record) for r in requests))
        phys = seg.end
        holds = self.holds
        next_queue_offset: dict[tuple[str, int], int] = {}
        placed: list[tuple[AppendRequest, ConsumeQueue, QueueHold | None, int, int]] = []
        for req in requests:
            key = (req.topic, req.queue_id)
            cq = self._queue(req.topic, req.queue_id)
            hold = holds.get(key) if holds else None
            qoff = next_queue_offset.get(key)
            if qoff is None:
                qoff = cq.max_offset if hold is None else hold.next
            next_queue_offset[key] = qoff + 1
            QUEUE_AND_PHYSICAL_OFFSETS.pack_into(req.record, POS_QUEUE_OFFSET, qoff, phys)
            placed.append((req, cq, hold, phys, qoff))
            phys += len(req.record)
        self._write(seg, b"".join(r.record for r in requests))
        queue_ends = {cq: cq.max_offset for _, cq, _, _, _ in placed}
        try:
            for req, cq, hold, phys_offset, _ in placed:
                if hold is None:  # else entered behind the big batch holding the queue
                    cq.append(phys_offset, len(req.record), req.tags_code)
                    cq.bytes_in += len(req.record)
        except OSError as exc:
            self._roll_back(seg, placed[0][3], queue_ends)
            raise self._write_failure(exc) from None
        for req, _, _, phys_offset, _ in placed:  # every record indexed before any listener runs
            self._index_keys(req, phys_offset)
        for req, _, hold, phys_offset, qoff in placed:
            self._wake(req, hold, phys_offset, qoff)
        return PutResult([entry[3] for entry in placed], [entry[4] for entry in placed], phys)

    def _put_one(self, req: AppendRequest) -> PutResult:
        """``put`` of one record (a single send, the common case), without the per-queue bookkeeping a
        mixed list needs."""
        record, topic, queue_id = req.record, req.topic, req.queue_id
        size = len(record)
        seg = self._reserve(size)
        phys = seg.end
        cq = self._queue(topic, queue_id)
        hold = self.holds.get((topic, queue_id)) if self.holds else None
        queue_offset = cq.max_offset if hold is None else hold.next
        QUEUE_AND_PHYSICAL_OFFSETS.pack_into(record, POS_QUEUE_OFFSET, queue_offset, phys)
        self._write(seg, record)
        if hold is None:  # else entered behind the big batch holding the queue
            try:
                cq.append(phys, size, req.tags_code)
            except OSError as exc:
                self._roll_back(seg, phys, {cq: queue_offset})
                raise self._write_failure(exc) from None
            cq.bytes_in += size
        self._index_keys(req, phys)
        self._wake(req, hold, phys, queue_offset)
        return PutResult([phys], [queue_offset], phys + size)

    def _index_keys(self, req: AppendRequest, phys: int) -> None:
        if self.index is not None and req.keys:
            self.index.add(req.topic, req.keys, phys)

    def _wake(self, req: AppendRequest, hold: QueueHold | None, phys: int, queue_offset: int) -> None:
        """A stored record's dispatch (pull wake-ups, timers); under a hold it waits behind the big
        batch's entries (store/batch_append.py)."""
        if hold is not None:
            hold.defer([phys], [len(req.record)], [req.tags_code])
        else:
            for listener in self.dispatch_listeners:
                listener(req.topic, req.queue_id, queue_offset + 1, req.tags_code)

    def put_batch(self, topic: str, queue_id: int, batch: StoredBatch) -> PutResult:
        """Append a batch's records, stored back to back for one queue, in one write; all or none."""
        data, sizes = batch.data, batch.sizes
        seg = self._reserve(len(data))
        cq = self._queue(topic, queue_id)
        hold = self.holds.get((topic, queue_id)) if self.holds else None
        first_queue_offset = cq.max_offset if hold is None else hold.next
        base = seg.end
        phys_offsets = pack_offsets(data, sizes, base, first_queue_offset)
        self._write(seg, data)
        if hold is not None:  # entered behind the big batch holding the queue (store/batch_append.py)
            hold.defer(phys_offsets, sizes, batch.tags_codes)
        else:
            try:
                cq.append_many(phys_offsets, sizes, batch.tags_codes)
            except OSError as exc:
                self._roll_back(seg, base, {cq: first_queue_offset})
                raise self._write_failure(exc) from None
        cq.bytes_in += len(data)
        if self.index is not None and any(batch.keys):  # nsqd's records have no key to index
            if batch.key_hashes is not None:
                self.index.add_hashed(batch.key_hashes, phys_offsets)
            else:
                self.index.add_many(topic, batch.keys, phys_offsets)
        end_queue_offset = first_queue_offset + len(sizes)
        if hold is None and self.dispatch_listeners:
            tags_codes = batch.tags_codes
            distinct = tags_codes if len(tags_codes) == 1 else set(tags_codes)
            for listener in self.dispatch_listeners:
                for tags_code in distinct:
                    listener(topic, queue_id, end_queue_offset, tags_code)
        return PutResult(phys_offsets, list(range(first_queue_offset, end_queue_offset)), base + len(data))

    async def put_batch_in_steps(self, topic: str, queue_id: int, batch: StoredBatch) -> PutResult:
        """``put_batch`` for a big batch, its queue entries and index entries written in steps that give
        the event loop back (store/batch_append.py)."""
        return await batch_append.put_in_steps(self, topic, queue_id, batch)

    def _roll_back(self, seg: MappedFile, log_pos: int, queue_ends: Mapping[ConsumeQueue, int]) -> None:
        """Undo a write whose consume-queue entries could not be stored (a full disk): the records leave
        the log and the entries the queues, so no queue offset is handed out twice and no refused record
        comes back when the queues are rebuilt from the log."""
        for cq, end in queue_ends.items():
            cq.rollback_to(end)
        seg.rollback_to(log_pos - seg.base)
        self.commitlog.flushed = min(self.commitlog.flushed, self.commitlog.max_offset)

    @staticmethod
    def _write_failure(exc: OSError) -> StoreError:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            log.error("store: disk full, refusing writes until space is freed")
            return StoreError("disk full: message not stored")
        log.error("store: write failed: %s", exc)
        return StoreError(f"write failed: {exc}")

    # --- durability (store/flush.py) ----------------------------------------------------------------

    async def wait_durable(self, end_offset: int) -> None:
        """Resolve once the commit log is fsynced up to ``end_offset`` (sync-flush acknowledgements)."""
        await self.flusher.wait_durable(end_offset)

    def is_durable(self, end_offset: int) -> bool:
        return self.flusher.is_durable(end_offset)

    def on_durable(self, end_offset: int, done: DurableCallback) -> None:
        """``wait_durable`` as a callback (store/flush.py ``Flusher.on_durable``)."""
        self.flusher.on_durable(end_offset, done)

    async def flush_commitlog(self) -> None:
        await self.flusher.flush_commitlog()

    async def flush_queues(self) -> None:
        """fsync consume queues and the index, then record how far the log is dispatched durably."""
        await self.flusher.flush_queues()

    # --- reading ------------------------------------------------------------------------------------

    def get(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_nums: int,
        match: Callable[[int], bool] | None = None,
        max_transfer: int = MAX_TRANSFER_COUNT,
        props_match: Callable[[bytes], bool] | None = None,
    ) -> GetResult:
        """Read like Java's DefaultMessageStore.getMessage: see
        docs/protocols/rocketmq-consumption.md#pull-path for every status.

        ``match`` filters by the consume queue's tags code; ``props_match`` (an SQL92 subscription) by
        each record's encoded properties, read from the commit log (Java's isMatchedByCommitLog).

        At most ``max_transfer`` records (Java's maxTransferCountOnMessageInMemory, 32, for pulls) and
        ``MAX_TRANSFER_BYTES``; nsqd's channels, which read ahead for themselves, take more at a time.
        """
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        lo, hi = cq.min_offset, cq.max_offset
        if hi == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
        if offset < lo:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, lo, lo, hi)
        if offset == hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
        if offset > hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, hi, lo, hi)
        limit = min(max_nums, max_transfer) if max_nums > 0 else 1
        # Unfiltered, the first ``limit`` entries are all a pull can take; filtered, Java scans up to 800.
        filtered = match is not None or props_match is not None
        entries = cq.entries(offset, max(800, max_nums) if filtered else limit)
        if not entries:
            return GetResult(GetStatus.OFFSET_FOUND_NULL, offset, lo, hi)
        if not filtered:
            span = self._span(entries)
            if span is not None:
                return GetResult(GetStatus.FOUND, offset + span[1], lo, hi, span[0], span[1])
        messages: list[bytes] = []
        size_taken = 0
        scanned = 0
        removed = False
        seg_base, seg_end, view = 0, 0, None
        for phys, size, tags in entries:
            if len(messages) >= limit or (messages and size_taken + size > MAX_TRANSFER_BYTES):
                break
            scanned += 1
            if match is not None and not match(tags):
                continue
            if not seg_base <= phys or phys + size > seg_end:
                seg = self.commitlog.segment_at(phys)
                if seg is None or phys + size > seg.end:
                    removed = True
                    continue
                seg_base, seg_end, view = seg.base, seg.end, seg.view
            assert view is not None
            record = view[phys - seg_base : phys - seg_base + size]
            if props_match is not None and not props_match(record_properties(record)):
                continue
            messages.append(record)
            size_taken += size
        next_offset = offset + scanned
        if messages:
            return GetResult(GetStatus.FOUND, next_offset, lo, hi, b"".join(messages), len(messages))
        status = GetStatus.MESSAGE_WAS_REMOVING if removed else GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, next_offset, lo, hi)

    def _span(self, entries: list[tuple[int, int, int]]) -> tuple[bytes, int] | None:
        """(records, count) of an unfiltered read within ``MAX_TRANSFER_BYTES`` (at least one record), when
        they all lie in one segment (nearly always); None sends the read through the general loop.

        Records back to back in the log (a queue written alone: nsqd's topics, a busy producer's) are one
        slice of the mapping, else one slice per record, joined. Slicing 200+ records one by one and
        joining them was a third of what nsqd's channels spent on a read (docs/performance.md).
        """
        ends = list(itertools.accumulate(size for _, size, _ in entries))
        taken = bisect.bisect_right(ends, MAX_TRANSFER_BYTES) or 1
        first, (last, last_size, _) = entries[0][0], entries[taken - 1]
        seg = self.commitlog.segment_at(first)
        if seg is None or last + last_size > seg.end:
            return None
        base, view = seg.base, seg.view
        if last + last_size - first == ends[taken - 1]:
            return view[first - base : last + last_size - base], taken
        return b"".join([view[phys - base : phys - base + size] for phys, size, _ in entries[:taken]]), taken

    def read_message(self, commit_log_offset: int) -> bytes | None:
        return self.commitlog.read_record(commit_log_offset)

    def query_by_key(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[bytes]:
        if self.index is None:
            return []
        found = []
        for offset in sorted(self.index.lookup(topic, key), reverse=True):
            data = self.commitlog.read_record(offset)
            if data is None:
                continue
            msg = decode_record(data, decompress=False)
            if msg.topic != topic or key not in record_keys(msg.properties):
                continue
            if begin_ms <= msg.store_timestamp <= end_ms or (begin_ms == 0 and end_ms == 0):
                found.append(data)
                if len(found) >= max_num:
                    break
        return found

    def in_disk(self, topic: str, queue_id: int, offset: int, memory_bytes: int) -> bool:
        """Whether the record at ``offset`` lies more than ``memory_bytes`` behind the log's end, so no
        longer counted as in memory (Java's checkInDiskByConsumeOffset; False when there is none)."""
        cq = self._queues.get((topic, queue_id))
        entry = cq.entry(offset) if cq is not None else None
        return entry is not None and self.commitlog.max_offset - entry[0] > memory_bytes

    def store_timestamp_at(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self._queues.get((topic, queue_id))
        entry = cq.entry(offset) if cq else None
        return self.commitlog.store_timestamp(entry[0]) if entry else -1

    def search_offset_by_timestamp(self, topic: str, queue_id: int, timestamp: int) -> int:
        """Offset whose store time is nearest ``timestamp`` (ties to the left), as Java answers."""
        cq = self._queues.get((topic, queue_id))
        if cq is None or cq.max_offset == cq.min_offset:
            return 0
        first = cq.bisect(self.commitlog.store_timestamp, timestamp)
        if first >= cq.max_offset:
            return cq.max_offset - 1
        if first == cq.min_offset:
            return first
        after = self.store_timestamp_at(topic, queue_id, first)
        before = self.store_timestamp_at(topic, queue_id, first - 1)
        return first if after - timestamp < timestamp - before else first - 1

    # --- topics and retention -----------------------------------------------------------------------

    def delete_topic(self, topic: str) -> None:
        for queue_id in self._queue_ids.pop(topic, ()):
            self._queues.pop((topic, queue_id)).destroy()
        shutil.rmtree(self.config.data_dir / "consumequeue" / topic, ignore_errors=True)
        for listener in self.topic_deleted_listeners:
            listener(topic)

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.retention_check_interval_s)
            try:
                await self.apply_retention()
            except OSError as exc:
                log.error("store: retention failed: %s", exc)

    async def apply_retention(self) -> int:
        """Delete whole segments past their age or past ``retention_bytes``: only by those rules, never
        because the disk is filling up (a full disk refuses writes instead, see DiskGuard)."""
        async with self.flusher.lock:  # files are closed here: not while a flush fsyncs them in a thread
            deleted = self.commitlog.delete_expired(
                self.config.file_reserved_hours * 3600, self.config.retention_bytes
            )
            if deleted:
                log_min = self.commitlog.min_offset
                for cq in self._queues.values():
                    cq.correct_min_offset(log_min)
                if self.index is not None:
                    self.index.forget_below(log_min)
        return deleted

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await cancel_and_wait(self._tasks)
        await self.flusher.flush_commitlog()
        await self.flusher.flush_queues()
        self.flusher.stop(StoreError("store is shut down"))
        for cq in self._queues.values():
            cq.close()
        if self.index is not None:
            self.index.close()
        self.commitlog.close()
        os.close(self._lock_fd)
