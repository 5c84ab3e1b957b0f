"""The lite pull consumer (Java DefaultLitePullConsumer): the consumer core's rebalance and pull loops
with a buffer in place of a listener, so the application calls ``poll`` when it is ready.

This module owns the buffer and the application's side of it: poll, commit (automatic or manual),
assign and seek.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

from tidemq.address import DEFAULT_NAMESRV_ADDR
from tidemq.aio import TaskSet
from tidemq.client import api
from tidemq.client.allocate import AllocateStrategy
from tidemq.client.config import ClientConfig, wrap_namespace
from tidemq.client.consumer.core import ConsumerCore, CoreView, PullSettings
from tidemq.client.consumer.process_queue import ProcessQueue
from tidemq.client.consumer.types import ConsumeFromWhere, MessageModel
from tidemq.client.instance import MQClientError
from tidemq.client.message_queue import MessageQueue
from tidemq.record import MessageExt

log = logging.getLogger(__name__)
Fetched = tuple[MessageQueue, ProcessQueue, list[MessageExt]]


class _BufferService:
    """Consume service that parks fetched batches until ``poll`` takes them."""

    def __init__(self, capacity: int) -> None:
        self.buffer: asyncio.Queue[Fetched] = asyncio.Queue(capacity)
        self._tasks = TaskSet()  # puts waiting for room in a full buffer

    def submit(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue, dispatch: bool) -> None:
        try:
            self.buffer.put_nowait((mq, pq, msgs))
        except asyncio.QueueFull:
            self._tasks.spawn(self.buffer.put((mq, pq, msgs)))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()


class LitePullConsumer(CoreView):
    """A consumer core whose pulled batches wait in a buffer until ``poll`` takes them."""

    # Fixed attributes: the pull settings live on ``core`` (see PushConsumer).
    __slots__ = ("_buffer", "_uncommitted", "auto_commit", "core")

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
        consume_timestamp: str | None = None,
        allocate: AllocateStrategy | None = None,
        consume_thread_max: int = 20,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue_mib: int = 100,
        consume_concurrently_max_span: int = 2000,
        post_subscription_when_pull: bool = False,
        offset_store_dir: Path | None = None,
        # The push consumer's listener settings, accepted alike; nothing here consumes with a listener.
        consume_batch_max_size: int = 1,
        max_reconsume_times: int = -1,
        consume_timeout_min: float = 15.0,
        await_termination_s: float = 30.0,
    ) -> None:
        self.auto_commit = auto_commit
        self._buffer = _BufferService(
            capacity=max(1, pull_threshold_for_queue // max(1, pull_batch_size)) * 8
        )
        self.core = ConsumerCore(
            group,
            namesrv_addr,
            config=config,
            settings=PullSettings.from_arguments(locals()),
            consume_type="CONSUME_ACTIVELY",
            consume_service=self._buffer,
            consume_directly=self.consume_directly,
        )
        self.core.retry_subscription = False
        self.core.advance_offset_when_idle = auto_commit  # manual commit: only commit() moves offsets
        self._uncommitted: dict[MessageQueue, int] = {}

    # --- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start without a subscription if need be: queues may be assigned after start."""
        self.core.register()
        await self.core.join()
        self.core.instance.rebalance_now()

    async def shutdown(self) -> None:
        """Stop pulling (what is buffered and not polled stays uncommitted), persist the committed offsets,
        release the queues and unregister."""
        if not self.auto_commit:
            self._uncommitted.clear()  # uncommitted polls are not committed by closing
        if not self.core.running:
            return
        await self.core.stop_pulling()
        await self._buffer.close()
        await self.core.release_queues()
        await self.core.unregister()

    async def __aenter__(self) -> LitePullConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # --- what to read ---------------------------------------------------------------------------------

    def assign(self, queues: list[MessageQueue]) -> None:
        """Read exactly these queues (no rebalance), e.g. from ``fetch_message_queues``."""
        self.core.assign(queues)

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
                    self.core.offset_store.update(mq, offset, increase_only=True)
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
        assigned = self.core.assigned
        if mq not in self.rebalancer.process_queues and (assigned is None or mq not in assigned):
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

    async def consume_directly(self, msg: MessageExt) -> dict[str, Any]:
        """CONSUME_MESSAGE_DIRECTLY: there is no listener to run the message on, and the answer says so."""
        reason = "the lite pull consumer has no listener"
        log.warning("group %s cannot consume %s directly: %s", self.group, msg.msg_id, reason)
        return {
            "order": False,
            "autoCommit": True,
            "consumeResult": "CR_THROW_EXCEPTION",
            "remark": reason,
            "spentTimeMills": 0,
        }
