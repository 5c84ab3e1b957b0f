"""Orderly consumption (Java ConsumeMessageOrderlyService): one batch at a time per queue, under the
broker-side queue lock, a local per-queue lock and the process queue's consume lock."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from tidemq.aio import TaskSet
from tidemq.client.consumer.process_queue import ProcessQueue
from tidemq.client.consumer.types import ConsumeContext, ConsumeStatus, MessageModel
from tidemq.client.message_queue import MessageQueue
from tidemq.remoting.message import MessageExt, Prop

if TYPE_CHECKING:
    from tidemq.client.consumer.push import PushConsumer

log = logging.getLogger(__name__)
MAX_TIME_CONSUME_CONTINUOUSLY_S = 60.0
RELOCK_DELAY_S = 0.1


class OrderlyConsumeService:
    def __init__(self, consumer: PushConsumer) -> None:
        self.consumer = consumer
        self._queue_locks: dict[MessageQueue, asyncio.Lock] = {}
        self._tasks = TaskSet()  # one consuming task per queue with messages, and delayed retries

    def start(self) -> None:
        pass

    def submit(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue, dispatch: bool) -> None:
        if dispatch:
            self._tasks.spawn(self._consume_queue(pq, mq))

    def _later(self, pq: ProcessQueue, mq: MessageQueue, delay_s: float) -> None:
        async def again() -> None:
            await asyncio.sleep(delay_s)
            await self._consume_queue(pq, mq)

        self._tasks.spawn(again())

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
                if status is not ConsumeStatus.SUCCESS and not await self._give_up(msgs):
                    for msg in msgs:
                        msg.reconsume_times += 1
                    pq.consume_again(msgs)
                    self._later(pq, mq, ctx.suspend_current_queue_time_ms / 1000)
                    return
                offset = pq.commit()
                if offset >= 0 and not pq.dropped:
                    consumer.offset_store.update(mq, offset)

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
        if self._tasks:
            _, pending = await asyncio.wait(list(self._tasks), timeout=timeout)
            for task in pending:
                task.cancel()
