"""The push consumer: subscribe, register a listener, start; messages arrive through long-polling pulls."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

from tidemq.address import DEFAULT_NAMESRV_ADDR
from tidemq.client import api
from tidemq.client.allocate import AllocateStrategy, Averagely
from tidemq.client.config import ClientConfig, wrap_namespace
from tidemq.client.consumer.concurrently import ConcurrentConsumeService
from tidemq.client.consumer.offset_store import (
    NO_OFFSET,
    LocalFileOffsetStore,
    OffsetStore,
    ReadMode,
    RemoteBrokerOffsetStore,
)
from tidemq.client.consumer.orderly import OrderlyConsumeService
from tidemq.client.consumer.rebalance import Rebalancer
from tidemq.client.consumer.types import (
    ConsumeContext,
    ConsumeFromWhere,
    ConsumeHook,
    ConsumeStatus,
    Listener,
    ListenerCall,
    MessageModel,
    Subscription,
    listener_call,
)
from tidemq.client.instance import ClientInstance, MQClientError
from tidemq.client.message import Message
from tidemq.client.message_queue import MessageQueue
from tidemq.client.producer import Producer
from tidemq.record import MessageExt, Prop
from tidemq.remoting import jsonx
from tidemq.remoting.names import RETRY_PREFIX, retry_topic

log = logging.getLogger(__name__)
DEFAULT_OFFSET_DIR = Path.home() / ".rocketmq_offsets"
LOCK_INTERVAL_S = 20.0


class PushConsumer:
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
        base = config or ClientConfig(namesrv_addr=namesrv_addr)
        self.config = base.with_unique_instance() if message_model is MessageModel.CLUSTERING else base
        self.group = wrap_namespace(self.config.namespace, group)
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.consume_timestamp = consume_timestamp or datetime.fromtimestamp(time.time() - 1800).strftime(
            "%Y%m%d%H%M%S"
        )
        self.allocate: AllocateStrategy = allocate or Averagely()
        self.consume_thread_max = consume_thread_max
        self.pull_batch_size = pull_batch_size
        self.consume_batch_max_size = consume_batch_max_size
        self.max_reconsume_times = max_reconsume_times
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue_mib * 1024 * 1024
        self.consume_concurrently_max_span = consume_concurrently_max_span
        self.suspend_timeout_ms = suspend_timeout_ms
        self.post_subscription_when_pull = post_subscription_when_pull
        self.consume_timeout_s = consume_timeout_min * 60
        self.offset_store_dir = offset_store_dir or DEFAULT_OFFSET_DIR
        self.await_termination_s = await_termination_s
        self.subscriptions: dict[str, Subscription] = {}
        self.hooks: list[ConsumeHook] = []
        self.listener: Listener | None = None
        self._call_listener: ListenerCall | None = None
        self.orderly = False
        self.running = False
        self.paused = False
        self.rebalancer = Rebalancer(self)
        self.consume_service: ConcurrentConsumeService | OrderlyConsumeService = ConcurrentConsumeService(
            self
        )
        self.executor = ThreadPoolExecutor(consume_thread_max, thread_name_prefix=f"consume-{group}")
        self._instance: ClientInstance | None = None
        self._offset_store: OffsetStore | None = None
        self._inner_producer: Producer | None = None
        self._lock_task: asyncio.Task[None] | None = None
        self.started_at = 0
        #: Clustering push consumers also consume their group's retry topic.
        self.retry_subscription = True
        self.consume_type = "CONSUME_PASSIVELY"
        self.requires_subscription = True
        #: With nothing cached, a filtered or empty pull moves the stored offset on (Java correctTagsOffset).
        self.advance_offset_when_idle = True

    # --- configuration ------------------------------------------------------------------------------

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Subscribe to ``topic`` with a tag expression: ``*``, ``TagA`` or ``TagA || TagB``."""
        wire = wrap_namespace(self.config.namespace, topic)
        self.subscriptions[wire] = Subscription.parse(wire, expression)
        if self.running:
            self.instance.rebalance_now()

    def unsubscribe(self, topic: str) -> None:
        self.subscriptions.pop(wrap_namespace(self.config.namespace, topic), None)

    def register_listener(self, listener: Listener, *, orderly: bool = False) -> None:
        """``listener(msgs, context)`` returns a ConsumeStatus (or raises); it may be a coroutine function."""
        if self.running:
            raise MQClientError("register the listener before start()")
        self.listener = listener
        self.orderly = orderly
        self.consume_service = OrderlyConsumeService(self) if orderly else ConcurrentConsumeService(self)

    @property
    def instance(self) -> ClientInstance:
        if self._instance is None:
            raise MQClientError("consumer is not started")
        return self._instance

    @property
    def offset_store(self) -> OffsetStore:
        if self._offset_store is None:
            raise MQClientError("consumer is not started")
        return self._offset_store

    def effective_max_reconsume_times(self, *, orderly: bool = False) -> int:
        if self.max_reconsume_times >= 0:
            return self.max_reconsume_times
        return sys.maxsize if orderly else 16

    # --- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.listener is None:
            raise MQClientError("no listener registered: call register_listener() before start()")
        if not self.subscriptions and self.requires_subscription:
            raise MQClientError("no subscription: call subscribe() before start()")
        self._call_listener = listener_call(self.listener, self.executor)
        self._instance = ClientInstance.get(self.config)
        if self.message_model is MessageModel.CLUSTERING:
            self._offset_store = RemoteBrokerOffsetStore(self._instance, self.group)
            if self.retry_subscription:
                retry = retry_topic(self.group)
                self.subscriptions[retry] = Subscription.parse(retry, "*")
        else:
            store = LocalFileOffsetStore(self.offset_store_dir, self._instance.client_id, self.group)
            store.load()
            self._offset_store = store
        self._instance.register_consumer(self)
        self.running = True
        self.started_at = int(time.time() * 1000)
        self.consume_service.start()
        await self._instance.start()
        for topic in self.subscriptions:
            try:
                await self._instance.update_route(topic)
            except MQClientError:
                raise
            except Exception as exc:
                log.warning("route of %s not available yet: %s", topic, exc)
        await self._instance.heartbeat_all()
        if self.orderly and self.message_model is MessageModel.CLUSTERING:
            self._lock_task = asyncio.create_task(self._lock_loop())
        self._instance.rebalance_now()

    async def _lock_loop(self) -> None:
        await asyncio.sleep(1.0)
        while True:
            await self.rebalancer.lock_all()
            await asyncio.sleep(LOCK_INTERVAL_S)

    async def shutdown(self) -> None:
        """Stop pulling; let the listeners finish what was already fetched (up to ``await_termination_s``)
        and commit it; persist offsets; then drop and unlock the queues and unregister. Java's order, so a
        message whose listener finished is not delivered again to the group's next consumer."""
        if not self.running:
            return
        self.running = False
        await self.rebalancer.stop_pulling()
        await self.consume_service.close(self.await_termination_s)
        if self._lock_task is not None:  # held until now: draining orderly queues needs their locks
            self._lock_task.cancel()
        mqs = set(self.rebalancer.process_queues)
        await self.offset_store.persist_all(mqs)
        self.rebalancer.drop_all()
        if self.orderly and self.message_model is MessageModel.CLUSTERING:
            await self.rebalancer.unlock(list(mqs))
        if self._inner_producer is not None:
            await self._inner_producer.shutdown()
        await self.instance.unregister(self.group, producer=False)
        self.executor.shutdown(wait=False)

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False

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

    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        """Where a newly owned queue starts: the stored offset, else by consume-from-where
        (docs/protocols/rocketmq-consumption.md#consume-from-where)."""
        last = await self.offset_store.read(mq, ReadMode.STORE)
        if last >= 0:
            return last
        if last != NO_OFFSET:
            return -1
        retry = mq.topic.startswith(RETRY_PREFIX)
        try:
            conn = await self.instance.broker_connection(mq.broker_name)
            if self.consume_from_where is ConsumeFromWhere.FIRST_OFFSET:
                return 0
            if self.consume_from_where is ConsumeFromWhere.LAST_OFFSET:
                return 0 if retry else await api.get_max_offset(conn, mq.topic, mq.queue_id)
            if retry:
                return await api.get_max_offset(conn, mq.topic, mq.queue_id)
            ts = int(datetime.strptime(self.consume_timestamp, "%Y%m%d%H%M%S").timestamp() * 1000)
            return await api.search_offset(conn, mq.topic, mq.queue_id, ts)
        except Exception as exc:
            log.warning("cannot compute the start offset of %s: %s", mq, exc)
            return -1

    # --- hooks for the client instance ------------------------------------------------------------------

    def heartbeat_data(self) -> dict[str, Any]:
        return {
            "groupName": self.group,
            "consumeType": self.consume_type,
            "messageModel": self.message_model.value,
            "consumeFromWhere": self.consume_from_where.value,
            "unitMode": False,
            "subscriptionDataSet": [sub.to_json(topic) for topic, sub in self.subscriptions.items()],
        }

    def assigned_queues(self, topic: str) -> set[MessageQueue] | None:
        """Queues fixed by the user instead of rebalance (lite pull ``assign``); None: rebalance decides."""
        return None

    def subscribed_topics(self) -> set[str]:
        return set(self.subscriptions)

    async def rebalance(self) -> None:
        if self.running:
            await self.rebalancer.rebalance()

    async def persist_offsets(self) -> None:
        await self.offset_store.persist_all(set(self.rebalancer.process_queues))

    def queue_offsets(self, topic: str) -> dict[MessageQueue, int]:
        return self.offset_store.offsets(topic)

    async def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: drop the queues, set the new offsets, persist, start again."""
        self.pause()
        try:
            for mq in [mq for mq in self.rebalancer.process_queues if mq.topic == topic]:
                self.rebalancer.forget(mq)
            for mq, offset in offsets.items():
                self.offset_store.update(mq, offset)
                await self.offset_store.persist(mq)
        finally:
            self.resume()
        self.instance.rebalance_now()

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

    def running_info(self) -> dict[Any, Any]:
        mq_table = {}
        for mq, pq in self.rebalancer.process_queues.items():
            mq_table[jsonx.object_key(**mq.to_json())] = pq.info(self.offset_store.offsets().get(mq, -1))
        return {
            "properties": {
                "PROP_NAMESERVER_ADDR": self.config.namesrv_addr,
                "PROP_THREADPOOL_CORE_SIZE": str(self.consume_thread_max),
                "PROP_CONSUMEORDERLY": "true" if self.orderly else "false",
                "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY",
                "PROP_CLIENT_VERSION": "V4_9_8",
                "PROP_CONSUMER_START_TIMESTAMP": str(self.started_at),
                "messageModel": self.message_model.value,
                "consumeFromWhere": self.consume_from_where.value,
            },
            "subscriptionSet": [sub.to_json(topic) for topic, sub in self.subscriptions.items()],
            "mqTable": mq_table,
            "statusTable": {},
        }

    async def drain(self, timeout: float = 10.0) -> None:
        """Wait until every fetched message is consumed (useful in tests and scripts)."""
        deadline = time.monotonic() + timeout
        while any(pq.msg_count for pq in self.rebalancer.process_queues.values()):
            if time.monotonic() > deadline:
                raise TimeoutError("messages are still being consumed")
            await asyncio.sleep(0.02)
        with contextlib.suppress(Exception):
            await self.persist_offsets()
