"""The push consumer: subscribe, register a listener, start; messages arrive through long-polling pulls.

Composition (Java DefaultMQPushConsumerImpl): a ``ConsumerCore`` (registration, offset store, rebalance,
pull loops) feeding a consume service (concurrent or orderly) that calls the listener. This module owns
the listener side: calling it, sending failed messages back, the orderly lock timer and shutdown's order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tidemq.address import DEFAULT_NAMESRV_ADDR
from tidemq.client import api
from tidemq.client.allocate import AllocateStrategy
from tidemq.client.config import ClientConfig
from tidemq.client.consumer.concurrently import ConcurrentConsumeService
from tidemq.client.consumer.core import ConsumerCore, CoreView, PullSettings
from tidemq.client.consumer.orderly import OrderlyConsumeService
from tidemq.client.consumer.types import (
    ConsumeContext,
    ConsumeFromWhere,
    ConsumeHook,
    ConsumeStatus,
    Listener,
    ListenerCall,
    MessageModel,
    listener_call,
)
from tidemq.client.instance import MQClientError
from tidemq.client.message import Message
from tidemq.client.message_queue import MessageQueue
from tidemq.client.producer import Producer
from tidemq.record import MessageExt, Prop
from tidemq.remoting.names import retry_topic

log = logging.getLogger(__name__)
LOCK_INTERVAL_S = 20.0


class PushConsumer(CoreView):
    """A consumer core whose pulled batches a consume service (concurrent or orderly) gives the listener."""

    # Fixed attributes: a setting assigned here after construction would be silently ignored, since the
    # pull settings live on ``core``.
    __slots__ = (
        "_call_listener",
        "_inner_producer",
        "_lock_task",
        "await_termination_s",
        "consume_batch_max_size",
        "consume_service",
        "consume_thread_max",
        "consume_timeout_s",
        "core",
        "executor",
        "hooks",
        "listener",
        "max_reconsume_times",
    )

    def __init__(
        self,
        group: str,
        namesrv_addr: str = DEFAULT_NAMESRV_ADDR,
        *,
        config: ClientConfig | None = None,
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.LAST_OFFSET,
        consume_timestamp: str | None = None,
        allocate: AllocateStrategy | None = None,
        consume_thread_max: int = 20,
        pull_batch_size: int = 32,
        consume_batch_max_size: int = 1,
        max_reconsume_times: int = -1,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue_mib: int = 100,
        consume_concurrently_max_span: int = 2000,
        suspend_timeout_ms: int = 15_000,
        post_subscription_when_pull: bool = False,
        consume_timeout_min: float = 15.0,
        offset_store_dir: Path | None = None,
        await_termination_s: float = 30.0,
    ) -> None:
        self.consume_thread_max = consume_thread_max
        self.consume_batch_max_size = consume_batch_max_size
        self.max_reconsume_times = max_reconsume_times
        self.consume_timeout_s = consume_timeout_min * 60
        self.await_termination_s = await_termination_s
        self.hooks: list[ConsumeHook] = []
        self.listener: Listener | None = None
        self._call_listener: ListenerCall | None = None
        self.consume_service: ConcurrentConsumeService | OrderlyConsumeService = ConcurrentConsumeService(
            self
        )
        self.core = ConsumerCore(
            group,
            namesrv_addr,
            config=config,
            settings=PullSettings.from_arguments(locals()),
            consume_type="CONSUME_PASSIVELY",
            consume_service=self.consume_service,
            consume_directly=self.consume_directly,
        )
        self.executor = ThreadPoolExecutor(consume_thread_max, thread_name_prefix=f"consume-{group}")
        self._inner_producer: Producer | None = None
        self._lock_task: asyncio.Task[None] | None = None

    # --- what the core holds ------------------------------------------------------------------------

    @property
    def orderly(self) -> bool:
        return self.core.orderly

    @property
    def paused(self) -> bool:
        return self.core.paused

    # --- configuration ------------------------------------------------------------------------------

    def register_listener(self, listener: Listener, *, orderly: bool = False) -> None:
        """``listener(msgs, context)`` returns a ConsumeStatus (or raises); it may be a coroutine function."""
        if self.core.running:
            raise MQClientError("register the listener before start()")
        self.listener = listener
        self.core.orderly = orderly
        self.consume_service = OrderlyConsumeService(self) if orderly else ConcurrentConsumeService(self)
        self.core.consume_service = self.consume_service

    def effective_max_reconsume_times(self, *, orderly: bool = False) -> int:
        if self.max_reconsume_times >= 0:
            return self.max_reconsume_times
        return sys.maxsize if orderly else 16

    # --- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        core = self.core
        if self.listener is None:
            raise MQClientError("no listener registered: call register_listener() before start()")
        if not core.subscriptions:
            raise MQClientError("no subscription: call subscribe() before start()")
        self._call_listener = listener_call(self.listener, self.executor)
        core.register()
        self.consume_service.start()
        await core.join()
        if core.orderly and core.message_model is MessageModel.CLUSTERING:
            self._lock_task = asyncio.create_task(self._lock_loop())
        core.instance.rebalance_now()

    async def _lock_loop(self) -> None:
        await asyncio.sleep(1.0)
        while True:
            await self.core.rebalancer.lock_all()
            await asyncio.sleep(LOCK_INTERVAL_S)

    async def shutdown(self) -> None:
        """Stop pulling; let the listeners finish what was already fetched (up to ``await_termination_s``)
        and commit it; persist offsets; then drop and unlock the queues and unregister. Java's order, so a
        message whose listener finished is not delivered again to the group's next consumer."""
        if not self.core.running:
            return
        await self.core.stop_pulling()
        await self.consume_service.close(self.await_termination_s)
        if self._lock_task is not None:  # held until now: draining orderly queues needs their locks
            self._lock_task.cancel()
        await self.core.release_queues()
        if self._inner_producer is not None:
            await self._inner_producer.shutdown()
        await self.core.unregister()
        self.executor.shutdown(wait=False)

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # --- consumption helpers used by the services -----------------------------------------------------

    async def run_listener(
        self, msgs: list[MessageExt], ctx: ConsumeContext
    ) -> tuple[ConsumeStatus | None, BaseException | None]:
        """Call the listener. An exception, None or anything that is not a ConsumeStatus comes back as
        status None (try later), each logged: a listener that keeps answering wrong must be seen, never
        retried silently."""
        assert self._call_listener is not None
        status: ConsumeStatus | None = None
        error: BaseException | None = None
        try:
            result = await self._call_listener(msgs, ctx)
        except Exception as exc:
            error = exc
            log.warning("listener of group %s raised %s: %s", self.group, type(exc).__name__, exc)
        else:
            if isinstance(result, ConsumeStatus):
                status = result
            elif result is None:
                log.warning(
                    "listener of group %s returned None for %d messages of %s; consuming them again later",
                    self.group,
                    len(msgs),
                    ctx.message_queue,
                )
            else:
                log.warning(
                    "listener of group %s returned %r, which is not a ConsumeStatus; consuming its %d "
                    "messages of %s again later (return ConsumeStatus.CONSUME_SUCCESS or RECONSUME_LATER)",
                    self.group,
                    result,
                    len(msgs),
                    ctx.message_queue,
                )
        for hook in self.hooks:
            hook(msgs, ctx, status, error)
        return status, error

    async def send_back(self, msg: MessageExt, delay_level: int) -> bool:
        """Return a failed message to the broker; if that fails, re-send it to the retry topic ourselves."""
        limit = self.effective_max_reconsume_times(orderly=self.orderly)
        try:
            conn = await self.instance.broker_connection(msg.broker_name)
            await api.send_back(conn, msg, self.group, delay_level, min(limit, 2**31 - 1))
            return True
        except Exception as exc:
            log.warning("send-back of %s failed (%s); re-sending it to the retry topic", msg.msg_id, exc)
        try:
            producer = await self._retry_producer()
            props = dict(msg.properties)
            props[Prop.RETRY_TOPIC] = props.get(Prop.RETRY_TOPIC, msg.topic)
            props.setdefault(Prop.ORIGIN_MESSAGE_ID, msg.msg_id)
            props[Prop.RECONSUME_TIME] = str(msg.reconsume_times + 1)
            props[Prop.MAX_RECONSUME_TIMES] = str(min(limit, 2**31 - 1))
            props.pop(Prop.UNIQ_KEY, None)
            retry = Message(
                retry_topic(self.group),
                msg.body,
                properties=props,
                delay_level=0 if delay_level < 0 else 3 + msg.reconsume_times,
            )
            await producer.send(retry)
            return True
        except Exception as exc:
            log.warning(
                "re-sending %s to the retry topic failed too (%s); consuming it again here", msg.msg_id, exc
            )
            return False

    async def _retry_producer(self) -> Producer:
        if self._inner_producer is None:
            self._inner_producer = Producer("CLIENT_INNER_PRODUCER", config=self.config)
            await self._inner_producer.start()
        return self._inner_producer

    # --- answers for the client instance ---------------------------------------------------------------

    async def consume_directly(self, msg: MessageExt) -> dict[str, Any]:
        """CONSUME_MESSAGE_DIRECTLY: run the listener on one message, commit nothing, report how it went."""
        started = time.monotonic()
        ctx = ConsumeContext(MessageQueue(msg.topic, msg.broker_name, msg.queue_id))
        status, error = await self.run_listener([msg], ctx)
        if status is None:
            result = "CR_THROW_EXCEPTION" if error else "CR_RETURN_NULL"
        elif status.ok:
            result = "CR_SUCCESS"
        elif status is ConsumeStatus.COMMIT:
            result = "CR_COMMIT" if self.orderly else "CR_SUCCESS"
        elif status is ConsumeStatus.ROLLBACK:
            result = "CR_ROLLBACK" if self.orderly else "CR_LATER"
        else:
            result = "CR_LATER"
        return {
            "order": self.orderly,
            "autoCommit": ctx.auto_commit,
            "consumeResult": result,
            "remark": str(error) if error else None,
            "spentTimeMills": int((time.monotonic() - started) * 1000),
        }

    async def drain(self, timeout: float = 10.0) -> None:
        """Wait until every fetched message is consumed (useful in tests and scripts)."""
        deadline = time.monotonic() + timeout
        while any(pq.msg_count for pq in self.rebalancer.process_queues.values()):
            if time.monotonic() > deadline:
                raise TimeoutError("messages are still being consumed")
            await asyncio.sleep(0.02)
        with contextlib.suppress(Exception):
            await self.core.persist_offsets()
