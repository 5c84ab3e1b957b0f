"""The store's durability: fsyncs of the commit log, and of the consume queues with the checkpoint.

The fsyncs run in worker threads, so the event loop goes on while the disk works. Concurrent senders in
sync mode wait on the same log fsync (group commit): every waiter whose records the fsync covers is
answered by it. The checkpoint records how far the log is dispatched durably, so recovery re-dispatches
only what is past it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from tidemq.aio import finish_in_thread, wait_or_timeout
from tidemq.histogram import LatencyHistogram
from tidemq.store.batch_append import QueueHold
from tidemq.store.commitlog import CommitLog
from tidemq.store.config import FlushMode, StoreConfig
from tidemq.store.consume_queue import ConsumeQueue
from tidemq.store.documents import write_json_atomic
from tidemq.store.key_index import KeyIndex
from tidemq.store.mapped_file import MappedFile
from tidemq.store.requests import StoreError

log = logging.getLogger(__name__)

#: Told once the log is fsynced past its offset: None, or the error that stopped it (a StoreError).
DurableCallback = Callable[[StoreError | None], None]


class Flusher:
    """Flushes the log on a timer (async mode) or when a sync-flush writer waits, and the queues on a
    timer. Holds the store's file-system lock, which retention takes too: segments are never closed
    while a thread fsyncs them."""

    def __init__(
        self,
        config: StoreConfig,
        commitlog: CommitLog,
        queues: dict[tuple[str, int], ConsumeQueue],
        index: KeyIndex | None,
        holds: dict[tuple[str, int], QueueHold],
        checkpoint: Path,
    ) -> None:
        self.config = config
        self.commitlog = commitlog
        self._queues = queues
        self.index = index
        self._holds = holds
        self._checkpoint = checkpoint
        self._waiters: list[tuple[int, DurableCallback]] = []
        #: Why no waiter will be answered any more (the store shut down): a late one is told at once.
        self._stopped: StoreError | None = None
        self._wakeup = asyncio.Event()
        self.lock = asyncio.Lock()
        #: How far the checkpoint this process last wrote says the log is dispatched.
        self._checkpointed: int | None = None
        #: How long the commit log's fsyncs took (``/metrics``).
        self.latency = LatencyHistogram()

    def is_durable(self, end_offset: int) -> bool:
        return self.commitlog.flushed >= end_offset

    def on_durable(self, end_offset: int, done: DurableCallback) -> None:
        """Call ``done`` once the commit log is fsynced up to ``end_offset``: a sync-flush answer without a
        task or a future of its own (the broker's sends, one per message)."""
        if self._stopped is not None:
            _tell(done, self._stopped)
            return
        self._waiters.append((end_offset, done))
        self._wakeup.set()

    async def wait_durable(self, end_offset: int) -> None:
        """Resolve once the commit log is fsynced up to ``end_offset`` (sync-flush acknowledgements)."""
        if self.is_durable(end_offset):
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.on_durable(end_offset, functools.partial(_settle, fut))
        await fut

    async def commitlog_loop(self) -> None:
        sync_mode = self.config.flush_mode is FlushMode.SYNC
        interval = None if sync_mode else self.config.flush_interval_ms / 1000
        while True:
            await wait_or_timeout(self._wakeup, interval)
            self._wakeup.clear()
            await self.flush_commitlog()

    async def flush_commitlog(self) -> None:
        async with self.lock:
            target = self.commitlog.max_offset
            segments = self.commitlog.dirty_segments()
            for seg in segments:
                seg.dirty = False
            try:
                if segments:
                    started = time.perf_counter()
                    await finish_in_thread(_fsync_all, [seg.fileno() for seg in segments])
                    self.latency.observe(time.perf_counter() - started)
            except OSError as exc:
                for seg in segments:
                    seg.dirty = True
                log.error("store: fsync failed: %s", exc)
                self._fail_waiters(StoreError(f"fsync failed: {exc}"))
                return
            self.commitlog.flushed = max(self.commitlog.flushed, target)
        # Taken off before any is told: a callback may add waiters meanwhile.
        flushed, waiters, self._waiters = self.commitlog.flushed, self._waiters, []
        still_waiting = []
        for offset, done in waiters:
            if offset <= flushed:
                _tell(done, None)
            else:
                still_waiting.append((offset, done))
        self._waiters[:0] = still_waiting
        if self._waiters:
            self._wakeup.set()

    def _fail_waiters(self, exc: StoreError) -> None:
        waiters, self._waiters = self._waiters, []
        for _, done in waiters:
            _tell(done, exc)

    def stop(self, exc: StoreError) -> None:
        """Fail every waiter, and every later one at once: nothing will be fsynced any more."""
        self._stopped = exc
        self._fail_waiters(exc)

    async def queues_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.cq_flush_interval_ms / 1000)
            try:
                await self.flush_queues()
            except OSError as exc:
                log.error("store: flushing queues failed: %s", exc)

    async def flush_queues(self) -> None:
        """fsync consume queues and the index, then record how far the log is dispatched durably."""
        async with self.lock:
            dispatched = min(self.commitlog.flushed, self.commitlog.max_offset)
            if self._holds:  # a batch's entries still being written are re-dispatched after a crash
                dispatched = min(dispatched, *(hold.log_start for hold in self._holds.values()))
            files: list[MappedFile | KeyIndex] = [
                mf for cq in self._queues.values() for mf in cq.dirty_files()
            ]
            # Duplicates, closed by the thread: a topic deleted meanwhile closes its own descriptors, so
            # the thread never fsyncs a closed (or since reused) number.
            fds: list[int] = []
            try:
                if self.index is not None:
                    self.index.write_pending()
                    if self.index.dirty:
                        files.append(self.index)
                for mf in files:
                    fds.append(os.dup(mf.fileno()))
            except OSError:
                for fd in fds:
                    os.close(fd)
                raise
            if not fds and dispatched == self._checkpointed:
                return  # nothing new: an idle store leaves the disk alone
            for mf in files:
                mf.dirty = False
            try:
                await finish_in_thread(_fsync_then_checkpoint, fds, self._checkpoint, dispatched)
            except OSError:
                for mf in files:  # fsynced again next time, before a checkpoint can pass them
                    mf.dirty = True
                raise
            self._checkpointed = dispatched


def _settle(fut: asyncio.Future[None], failure: StoreError | None) -> None:
    if fut.done():  # its waiter was cancelled
        return
    if failure is None:
        fut.set_result(None)
    else:
        fut.set_exception(failure)


def _tell(done: DurableCallback, failure: StoreError | None) -> None:
    """One waiter's answer; a callback that raises is logged and does not keep the others waiting."""
    try:
        done(failure)
    except Exception:
        log.exception("store: a durability callback failed")


def _fsync_all(fds: list[int]) -> None:
    for fd in fds:
        os.fsync(fd)


def _fsync_then_checkpoint(fds: list[int], checkpoint: Path, dispatched: int) -> None:
    """fsync and close ``fds`` (duplicates made for this call), then write the checkpoint."""
    try:
        _fsync_all(fds)
    finally:
        for fd in fds:
            os.close(fd)
    write_json_atomic(checkpoint, {"dispatched": dispatched})
