"""Orderly consumption (Java ConsumeMessageOrderlyService): one batch at a time per queue, under the
broker-side queue lock, a local per-queue lock and the process queue's consume lock.

How a batch's answer is settled follows Java's processConsumeResult. With ``auto_commit`` (the default)
success commits the batch and try-later consumes it again after the suspend time. With ``auto_commit``
off, success only moves on; COMMIT commits everything consumed so far and ROLLBACK puts it all back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from tidemq.aio import TaskSet
from tidemq.client.consumer.process_queue import ProcessQueue
from tidemq.client.consumer.types import ConsumeContext, ConsumeStatus, MessageModel
from tidemq.client.message_queue import MessageQueue
from tidemq.record import MessageExt, Prop

if TYPE_CHECKING:
    from tidemq.client.consumer.push import PushConsumer

log = logging.getLogger(__name__)
MAX_TIME_CONSUME_CONTINUOUSLY_S = 60.0
RELOCK_DELAY_S = 0.1
#: Java clamps the suspend time a listener asks for to 10 ms .. 30 s.
SUSPEND_MIN_S, SUSPEND_MAX_S = 0.01, 30.0


class OrderlyConsumeService:
    def __init__(self, consumer: PushConsumer) -> None:
        self.consumer = consumer
        self._queue_locks: dict[MessageQueue, asyncio.Lock] = {}
        self._tasks = TaskSet()  # one consuming task per queue with messages
        self._timers: set[asyncio.TimerHandle] = set()  # queues to consume again after a pause
        self._stopping = False

    def start(self) -> None:
        pass

    def submit(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue, dispatch: bool) -> None:
        if dispatch and not self._stopping:
            self._tasks.spawn(self._consume_queue(pq, mq))

    def _later(self, pq: ProcessQueue, mq: MessageQueue, delay_s: float) -> None:
        """Consume the queue again after ``delay_s``; not once closing (what is left stays uncommitted)."""
        if self._stopping:
            return

        def again() -> None:
            self._timers.discard(handle)
            if not self._stopping:
                self._tasks.spawn(self._consume_queue(pq, mq))

        handle = asyncio.get_running_loop().call_later(delay_s, again)
        self._timers.add(handle)

    async def _consume_queue(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        consumer = self.consumer
        clustering = consumer.message_model is MessageModel.CLUSTERING
        async with self._queue_locks.setdefault(mq, asyncio.Lock()):
            began = time.monotonic()
            while not pq.dropped:
                if clustering and (not pq.locked or pq.lock_expired):
                    await consumer.rebalancer.lock(mq)
                    self._later(pq, mq, RELOCK_DELAY_S if pq.locked else 3.0)
                    return
                if time.monotonic() - began > MAX_TIME_CONSUME_CONTINUOUSLY_S:
                    self._later(pq, mq, 0.01)
                    return
                msgs = pq.take(max(1, consumer.consume_batch_max_size))
                if not msgs:
                    return
                ctx = ConsumeContext(mq)
                started = str(int(time.time() * 1000))
                for msg in msgs:
                    msg.put_property(Prop.CONSUME_START_TIME, started)
                async with pq.consume_lock:
                    if pq.is_dropped():
                        return
                    status, _error = await consumer.run_listener(msgs, ctx)
                if not await self._settle(status, ctx, msgs, pq, mq):
                    return

    async def _settle(
        self,
        status: ConsumeStatus | None,
        ctx: ConsumeContext,
        msgs: list[MessageExt],
        pq: ProcessQueue,
        mq: MessageQueue,
    ) -> bool:
        """Commit, roll back or suspend after a batch (Java processConsumeResult); False: stop for now."""
        success = status is not None and status.ok
        commit = -1
        if ctx.auto_commit:
            if status is ConsumeStatus.COMMIT or status is ConsumeStatus.ROLLBACK:
                log.warning(
                    "listener of group %s answered %s on %s with auto_commit on; committing the batch as "
                    "Java does (set context.auto_commit = False to commit or roll back yourself)",
                    self.consumer.group,
                    status.name,
                    mq,
                )
                success = True
            if not success and await self._suspend(ctx, msgs, pq, mq):
                return False
            commit = pq.commit()
        elif status is ConsumeStatus.COMMIT:
            commit = pq.commit()
        elif status is ConsumeStatus.ROLLBACK:
            pq.rollback()
            self._later(pq, mq, _suspend_s(ctx))
            return False
        elif not success and await self._suspend(ctx, msgs, pq, mq):
            return False
        if commit >= 0 and not pq.dropped:
            self.consumer.core.offset_store.update(mq, commit)
        return True

    async def _suspend(
        self, ctx: ConsumeContext, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue
    ) -> bool:
        """A try-later answer: consume the batch again after the suspend time (True), unless it is past
        maxReconsumeTimes and went to the dead-letter queue (False: move on)."""
        if await self._give_up(msgs):
            return False
        for msg in msgs:
            msg.reconsume_times += 1
        pq.consume_again(msgs)
        self._later(pq, mq, _suspend_s(ctx))
        return True

    async def _give_up(self, msgs: list[MessageExt]) -> bool:
        """Past maxReconsumeTimes a failed batch goes to the dead-letter queue and consumption moves on."""
        limit = self.consumer.effective_max_reconsume_times(orderly=True)
        if any(m.reconsume_times < limit for m in msgs):
            return False
        for msg in msgs:
            if not await self.consumer.send_back(msg, -1):
                return False
            log.warning(
                "message %s failed %d times; moved to the dead-letter queue", msg.msg_id, msg.reconsume_times
            )
        return True

    async def close(self, timeout: float) -> None:
        """Let the batches being consumed, and what their queues still hold, finish (up to ``timeout``);
        queues waiting out a pause are not started again, as Java's shutdown drops scheduled resubmits."""
        self._stopping = True
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        if len(self._tasks):
            _, pending = await asyncio.wait(list(self._tasks), timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)


def _suspend_s(ctx: ConsumeContext) -> float:
    return min(SUSPEND_MAX_S, max(SUSPEND_MIN_S, ctx.suspend_current_queue_time_ms / 1000))
