"""Concurrent consumption (Java ConsumeMessageConcurrentlyService): batches from any queue run in
parallel on a bounded pool; failed messages go back to the broker for a delayed retry. Either spelling of
success acknowledges the batch up to ``ack_index``; either spelling of try-later none of it.

The pool is ``consume_thread_max`` worker coroutines taking consume requests from one queue, as
Java's threads take them from the executor's queue: no task is created per batch. A pulled batch is queued
whole and each idle worker cuts its next ``consume_batch_max_size`` messages from the front, so a pull of
32 costs one queue entry, not 32, while its messages are still consumed in parallel.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from typing import TYPE_CHECKING

from tidemq.aio import TaskSet, cancel_and_wait
from tidemq.client.consumer.process_queue import ProcessQueue
from tidemq.client.consumer.types import ConsumeContext, ConsumeStatus, MessageModel
from tidemq.client.message_queue import MessageQueue
from tidemq.record import MessageExt, Prop

if TYPE_CHECKING:
    from tidemq.client.consumer.push import PushConsumer

log = logging.getLogger(__name__)
RETRY_LOCALLY_AFTER_S = 5.0
_CONSUME_SUCCESS = ConsumeStatus.CONSUME_SUCCESS
_SUCCESS = ConsumeStatus.SUCCESS
_CONSUME_START_TIME = Prop.CONSUME_START_TIME


class _Pulled:
    """A pulled batch waiting in the consume queue; workers take ``size`` messages at a time from ``next``."""

    __slots__ = ("mq", "msgs", "next", "pq")

    def __init__(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        self.msgs = msgs
        self.next = 0
        self.pq = pq
        self.mq = mq


class ConcurrentConsumeService:
    def __init__(self, consumer: PushConsumer) -> None:
        self.consumer = consumer
        self._pending: deque[_Pulled] = deque()
        self._idle: list[asyncio.Future[None]] = []  # one per worker waiting for work
        self._busy = 0  # workers inside a consume request
        self._wake_planned = False  # a _wake_if_still_pending is scheduled
        self._drained: asyncio.Event | None = None  # set by close(): wakes it when the last request ends
        self._workers: list[asyncio.Task[None]] = []
        self._tasks = TaskSet()  # local retries waiting out their delay
        self._cleaner: asyncio.Task[None] | None = None
        self._warned: set[ConsumeStatus] = set()
        self._started_ms, self._started_text = 0, "0"

    def start(self) -> None:
        self._cleaner = asyncio.create_task(self._clean_expired_loop())
        self._workers = [
            asyncio.create_task(self._work()) for _ in range(max(1, self.consumer.consume_thread_max))
        ]

    def submit(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue, dispatch: bool) -> None:
        if not msgs:
            return
        self._pending.append(_Pulled(msgs, pq, mq))
        self._wake_one()

    def _wake_one(self) -> None:
        """Wake one idle worker."""
        idle = self._idle
        while idle:
            waiter = idle.pop()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _wake_if_still_pending(self) -> None:
        """Requests remain after the loop's next turn: the worker that planned this suspended in its
        listener, so another worker starts. A listener that awaits brings in more workers one loop turn
        at a time; one that never suspends runs through the requests in one worker, and nobody is woken
        only to find the queue empty (waking the next worker at once did that every six messages or so:
        about 5 % of the consumer's CPU, docs/performance.md)."""
        self._wake_planned = False
        if self._pending:
            self._wake_one()

    def _next_request(self) -> tuple[list[MessageExt], ProcessQueue, MessageQueue] | None:
        """The next ``consume_batch_max_size`` messages from the front of the queue, or None."""
        pending = self._pending
        if not pending:
            return None
        pulled = pending[0]
        start, msgs = pulled.next, pulled.msgs
        end = start + max(1, self.consumer.consume_batch_max_size)
        if end >= len(msgs):
            pending.popleft()
            end = len(msgs)
        else:
            pulled.next = end
        return (msgs if start == 0 and end == len(msgs) else msgs[start:end]), pulled.pq, pulled.mq

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            request = self._next_request()
            if request is None:
                waiter: asyncio.Future[None] = loop.create_future()
                self._idle.append(waiter)
                await waiter
                continue
            msgs, pq, mq = request
            if self._pending and not self._wake_planned:
                self._wake_planned = True
                loop.call_soon(self._wake_if_still_pending)
            self._busy += 1
            try:
                await self._consume(msgs, pq, mq)
            except Exception:
                log.exception("consuming %d messages of %s failed", len(msgs), mq)
            finally:
                self._busy -= 1
                if self._drained is not None and not self._busy and not self._pending:
                    self._drained.set()

    async def _consume(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        if pq.dropped:
            return
        ctx = ConsumeContext(mq)
        started = self._start_time()
        for msg in msgs:
            msg.put_property(_CONSUME_START_TIME, started)
        status, error = await self.consumer.run_listener(msgs, ctx)
        if pq.is_dropped():
            log.info("queue %s was dropped while consuming; not committing %d messages", mq, len(msgs))
            return
        size = len(msgs)
        if status is _CONSUME_SUCCESS or status is _SUCCESS:
            acked = size if ctx.ack_index >= size - 1 else _acked(ctx, size)  # the call only when needed
        else:
            acked = self._acked_otherwise(status, ctx, size)
        if acked < size:
            msgs = msgs[:acked] + await self._failed(status, error, ctx, msgs[acked:], pq, mq)
        self._done(msgs, pq, mq)

    def _start_time(self) -> str:
        """CONSUME_START_TIME's text (ms), formatted once per millisecond rather than once per request."""
        now = int(time.time() * 1000)
        if now != self._started_ms:
            self._started_ms, self._started_text = now, str(now)
        return self._started_text

    def _acked_otherwise(self, status: ConsumeStatus | None, ctx: ConsumeContext, size: int) -> int:
        """How many leading messages an answer other than plain success acknowledges: none for a try-later
        (or no status); an orderly-only COMMIT / ROLLBACK is read as success / try-later, with a warning
        the first time, since a concurrent batch has nothing to commit or roll back."""
        if status is ConsumeStatus.COMMIT or status is ConsumeStatus.ROLLBACK:
            if status not in self._warned:
                self._warned.add(status)
                log.warning(
                    "listener of group %s answered %s, an orderly status; a concurrent listener answers "
                    "CONSUME_SUCCESS or RECONSUME_LATER (taking it as %s)",
                    self.consumer.group,
                    status.name,
                    "CONSUME_SUCCESS" if status is ConsumeStatus.COMMIT else "RECONSUME_LATER",
                )
            if status is ConsumeStatus.COMMIT:
                return _acked(ctx, size)
        return 0

    def _done(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        offset = pq.remove(msgs)
        if offset >= 0 and not pq.dropped:
            self.consumer.core.offset_store.update(mq, offset, increase_only=True)

    async def _failed(
        self,
        status: ConsumeStatus | None,
        error: BaseException | None,
        ctx: ConsumeContext,
        msgs: list[MessageExt],
        pq: ProcessQueue,
        mq: MessageQueue,
    ) -> list[MessageExt]:
        """Send failed messages back for a delayed retry; returns those settled, the rest retry here."""
        if self.consumer.message_model is MessageModel.BROADCASTING:
            if error is not None:
                reason = f"{type(error).__name__}: {error}"
            elif status is None:
                reason = "no status"
            else:
                reason = "past ack_index" if status.ok or status is ConsumeStatus.COMMIT else status.name
            for msg in msgs:
                log.warning("broadcasting: dropping message %s, not consumed (%s)", msg.msg_id, reason)
            return msgs
        settled: list[MessageExt] = []
        retry_here: list[MessageExt] = []
        for msg in msgs:
            sent = await self.consumer.send_back(msg, ctx.delay_level_when_next_consume)
            (settled if sent else retry_here).append(msg)
        if retry_here:
            for msg in retry_here:
                msg.reconsume_times += 1
            self._tasks.spawn(self._retry_later(retry_here, pq, mq))
        return settled

    async def _retry_later(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        await asyncio.sleep(RETRY_LOCALLY_AFTER_S)
        self.submit(msgs, pq, mq, True)

    async def _clean_expired_loop(self) -> None:
        """Messages a listener has held past consumeTimeout go back to the broker (level 3) and are freed."""
        interval = self.consumer.consume_timeout_s
        while True:
            await asyncio.sleep(min(interval, 60.0))
            if self.consumer.message_model is MessageModel.BROADCASTING:
                continue
            now_ms = time.time() * 1000
            for mq, pq in list(self.consumer.rebalancer.process_queues.items()):
                for msg in pq.messages()[:16]:
                    start = msg.properties.get(Prop.CONSUME_START_TIME, "")
                    if not start.isdigit() or now_ms - int(start) < interval * 1000:
                        break
                    log.warning("message %s exceeded the consume timeout; sending it back", msg.msg_id)
                    if await self.consumer.send_back(msg, 3):
                        self._done([msg], pq, mq)

    async def close(self, timeout: float) -> None:
        """Let queued and running consume requests finish (up to ``timeout``), then stop the pool.

        Local retries still waiting are dropped first, as Java's shutdown drops its scheduled resubmits:
        their messages stay uncommitted, so the group's next consumer gets them.
        """
        cleaner = [self._cleaner] if self._cleaner is not None else []
        await cancel_and_wait([*cleaner, *self._tasks])
        self._drained = asyncio.Event()
        if self._busy or self._pending:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._drained.wait()
        await cancel_and_wait(self._workers)


def _acked(ctx: ConsumeContext, size: int) -> int:
    """How many leading messages of a successful batch ``ctx.ack_index`` acknowledges (all by default)."""
    return min(size, max(0, ctx.ack_index + 1))
