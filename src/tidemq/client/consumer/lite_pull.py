"""The lite pull consumer (Java DefaultLitePullConsumer): the push consumer's rebalance and pull loops,
with a buffer in place of the listener, so the application calls ``poll`` when it is ready."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tidemq.address import DEFAULT_NAMESRV_ADDR
from tidemq.aio import TaskSet
from tidemq.client import api
from tidemq.client.config import ClientConfig, wrap_namespace
from tidemq.client.consumer.process_queue import ProcessQueue
from tidemq.client.consumer.push import PushConsumer
from tidemq.client.consumer.types import (
    ConsumeContext,
    ConsumeFromWhere,
    ConsumeStatus,
    MessageModel,
    Subscription,
)
from tidemq.client.instance import MQClientError
from tidemq.client.message_queue import MessageQueue
from tidemq.record import MessageExt

Fetched = tuple[MessageQueue, ProcessQueue, list[MessageExt]]


class _BufferService:
    """Consume service that parks fetched batches until ``poll`` takes them."""

    def __init__(self, capacity: int) -> None:
        self.buffer: asyncio.Queue[Fetched] = asyncio.Queue(capacity)
        self._tasks = TaskSet()  # puts waiting for room in a full buffer

    def start(self) -> None:
        pass

    def submit(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue, dispatch: bool) -> None:
        try:
            self.buffer.put_nowait((mq, pq, msgs))
        except asyncio.QueueFull:
            self._tasks.spawn(self.buffer.put((mq, pq, msgs)))

    async def close(self, timeout: float) -> None:
        for task in self._tasks:
            task.cancel()


async def _never_called(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
    raise RuntimeError("the lite pull consumer has no listener")


class LitePullConsumer(PushConsumer):
    def __init__(
        self,
        group: str,
        namesrv_addr: str = DEFAULT_NAMESRV_ADDR,
        *,
        config: ClientConfig | None = None,
        auto_commit: bool = True,
        pull_batch_size: int = 10,
        suspend_timeout_ms: int = 20_000,
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.LAST_OFFSET,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            group,
            namesrv_addr,
            config=config,
            pull_batch_size=pull_batch_size,
            suspend_timeout_ms=suspend_timeout_ms,
            message_model=message_model,
            consume_from_where=consume_from_where,
            **kwargs,
        )
        self.auto_commit = auto_commit
        self.listener = _never_called
        self.retry_subscription = False
        self.consume_type = "CONSUME_ACTIVELY"
        self.requires_subscription = False  # queues may be assigned after start
        self.advance_offset_when_idle = auto_commit  # manual commit: only commit() moves offsets
        self._buffer = _BufferService(
            capacity=max(1, self.pull_threshold_for_queue // max(1, pull_batch_size)) * 8
        )
        self.consume_service = self._buffer  # type: ignore[assignment]
        self._assigned: set[MessageQueue] | None = None
        self._uncommitted: dict[MessageQueue, int] = {}

    # --- what to read ---------------------------------------------------------------------------------

    def assign(self, queues: list[MessageQueue]) -> None:
        """Read exactly these queues (no rebalance), e.g. from ``fetch_message_queues``."""
        wrapped = {
            MessageQueue(wrap_namespace(self.config.namespace, q.topic), q.broker_name, q.queue_id)
            for q in queues
        }
        self._assigned = wrapped
        for mq in wrapped:
            self.subscriptions.setdefault(mq.topic, Subscription.parse(mq.topic, "*"))
        if self.running:
            self.instance.rebalance_now()

    def assigned_queues(self, topic: str) -> set[MessageQueue] | None:
        if self._assigned is None:
            return None
        return {mq for mq in self._assigned if mq.topic == topic}

    def assignment(self) -> set[MessageQueue]:
        return set(self.rebalancer.process_queues)

    async def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        route = await self.instance.update_route(wrap_namespace(self.config.namespace, topic))
        if route is None:
            raise MQClientError(f"no route info of topic {topic!r}")
        return route.subscribe_queues(topic)

    # --- reading --------------------------------------------------------------------------------------

    async def poll(self, timeout: float = 5.0) -> list[MessageExt]:
        """The next fetched batch, or [] when nothing arrives within ``timeout`` seconds."""
        buffer = self._buffer.buffer
        deadline = time.monotonic() + timeout
        while True:
            if buffer.empty():  # only an empty buffer needs the timer
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                try:
                    async with asyncio.timeout(remaining):
                        mq, pq, msgs = await buffer.get()
                except TimeoutError:
                    return []
            else:
                mq, pq, msgs = buffer.get_nowait()
            if pq.is_dropped():
                continue  # the queue was re-seeked or moved to another instance meanwhile
            offset = pq.remove(msgs)
            if offset >= 0:
                if self.auto_commit:
                    self.offset_store.update(mq, offset, increase_only=True)
                else:
                    self._uncommitted[mq] = max(offset, self._uncommitted.get(mq, offset))
            return msgs

    async def commit(self) -> None:
        """Commit what ``poll`` returned so far (with ``auto_commit`` this also runs every 5 s)."""
        for mq, offset in self._uncommitted.items():
            self.offset_store.update(mq, offset)
        self._uncommitted.clear()
        await self.offset_store.persist_all(set(self.offset_store.offsets()))

    # --- moving ---------------------------------------------------------------------------------------

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        if mq not in self.rebalancer.process_queues and (self._assigned is None or mq not in self._assigned):
            raise MQClientError(f"{mq} is not assigned to this consumer")
        conn = await self.instance.broker_connection(mq.broker_name)
        low, high = (
            await api.get_min_offset(conn, mq.topic, mq.queue_id),
            await api.get_max_offset(conn, mq.topic, mq.queue_id),
        )
        if not low <= offset <= high:
            raise MQClientError(f"offset {offset} of {mq} is outside [{low}, {high}]")
        async with self.rebalancer._lock:
            self.rebalancer.forget(mq)
            self._uncommitted.pop(mq, None)
            self.offset_store.update(mq, offset)
            await self.offset_store.persist(mq)
        self.instance.rebalance_now()

    async def seek_to_begin(self, mq: MessageQueue) -> None:
        conn = await self.instance.broker_connection(mq.broker_name)
        await self.seek(mq, await api.get_min_offset(conn, mq.topic, mq.queue_id))

    async def seek_to_end(self, mq: MessageQueue) -> None:
        conn = await self.instance.broker_connection(mq.broker_name)
        await self.seek(mq, await api.get_max_offset(conn, mq.topic, mq.queue_id))

    async def shutdown(self) -> None:
        if not self.auto_commit:
            self._uncommitted.clear()  # uncommitted polls are not committed by closing
        await super().shutdown()
