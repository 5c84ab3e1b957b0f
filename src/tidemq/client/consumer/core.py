"""The consumer core: what a push consumer and a lite pull consumer of a group both hold.

It is the consumer the client instance serves (Java's MQConsumerInner): it registers the group with the
instance, keeps the offset store (on the broker for clustering, in a local file for broadcasting), runs
rebalance (allocation, one process queue and one pull loop per owned queue) and hands every pulled batch
to its ``consume_service``. What happens to a batch after that is the owning consumer's business: a
listener behind a consume service (``PushConsumer``) or a buffer that ``poll`` reads (``LitePullConsumer``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from tidemq.client import api
from tidemq.client.allocate import AllocateStrategy, Averagely
from tidemq.client.config import ClientConfig, wrap_namespace
from tidemq.client.consumer.offset_store import (
    NO_OFFSET,
    LocalFileOffsetStore,
    OffsetStore,
    ReadMode,
    RemoteBrokerOffsetStore,
)
from tidemq.client.consumer.process_queue import ProcessQueue
from tidemq.client.consumer.rebalance import Rebalancer
from tidemq.client.consumer.types import ConsumeFromWhere, MessageModel, MessageSelector, Subscription
from tidemq.client.instance import ClientInstance, MQClientError
from tidemq.client.message_queue import MessageQueue
from tidemq.filter import TAG
from tidemq.record import MessageExt
from tidemq.remoting import jsonx
from tidemq.remoting.names import RETRY_PREFIX, retry_topic

log = logging.getLogger(__name__)
DEFAULT_OFFSET_DIR = Path.home() / ".rocketmq_offsets"


class ConsumeService(Protocol):
    """Where the pull loops hand what they pulled (a push consume service, or the lite pull buffer)."""

    def submit(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue, dispatch: bool) -> None: ...


ConsumeDirectly = Callable[[MessageExt], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class PullSettings:
    """The settings a push and a lite pull consumer both take, as the user gave them, for the core.

    Both public constructors keep their own explicit keyword signatures (their defaults differ:
    ``pull_batch_size``, ``suspend_timeout_ms``); ``from_arguments`` picks these settings out of a
    constructor's arguments, so the list is written once, here.
    """

    message_model: MessageModel
    consume_from_where: ConsumeFromWhere
    consume_timestamp: str | None
    allocate: AllocateStrategy | None
    pull_batch_size: int
    pull_threshold_for_queue: int
    pull_threshold_size_for_queue_mib: int
    consume_concurrently_max_span: int
    suspend_timeout_ms: int
    post_subscription_when_pull: bool
    offset_store_dir: Path | None
    consume_thread_max: int

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any]) -> PullSettings:
        """The settings named in a constructor's ``locals()``: one of them renamed or missing there
        fails here, at construction, with a KeyError naming it."""
        return cls(**{name: arguments[name] for name in _PULL_SETTING_NAMES})


_PULL_SETTING_NAMES = tuple(f.name for f in fields(PullSettings))


class ConsumerCore:
    """One consumer group's registration, offset store, rebalance and pull loops."""

    def __init__(
        self,
        group: str,
        namesrv_addr: str,
        *,
        config: ClientConfig | None,
        settings: PullSettings,
        consume_type: str,
        consume_service: ConsumeService,
        consume_directly: ConsumeDirectly,
    ) -> None:
        base = config or ClientConfig(namesrv_addr=namesrv_addr)
        self.message_model = settings.message_model
        self.config = base.with_unique_instance() if self.message_model is MessageModel.CLUSTERING else base
        self.group = wrap_namespace(self.config.namespace, group)
        self.consume_from_where = settings.consume_from_where
        self.consume_timestamp = settings.consume_timestamp or datetime.fromtimestamp(
            time.time() - 1800
        ).strftime("%Y%m%d%H%M%S")
        self.allocate: AllocateStrategy = settings.allocate or Averagely()
        self.pull_batch_size = settings.pull_batch_size
        self.pull_threshold_for_queue = settings.pull_threshold_for_queue
        self.pull_threshold_size_for_queue = settings.pull_threshold_size_for_queue_mib * 1024 * 1024
        self.consume_concurrently_max_span = settings.consume_concurrently_max_span
        self.suspend_timeout_ms = settings.suspend_timeout_ms
        self.post_subscription_when_pull = settings.post_subscription_when_pull
        self.offset_store_dir = settings.offset_store_dir or DEFAULT_OFFSET_DIR
        #: Reported in GET_CONSUMER_RUNNING_INFO as the consume pool's size.
        self.consume_thread_max = settings.consume_thread_max
        #: CONSUME_PASSIVELY (push) or CONSUME_ACTIVELY (lite pull), as sent in heartbeats.
        self.consume_type = consume_type
        self.consume_service = consume_service
        self._consume_directly = consume_directly
        self.subscriptions: dict[str, Subscription] = {}
        #: Queues fixed by the user instead of rebalance (lite pull ``assign``); None: rebalance decides.
        self.assigned: set[MessageQueue] | None = None
        #: Orderly consumption: queues are locked on the broker and pulled one answer at a time.
        self.orderly = False
        #: Clustering push consumers also consume their group's retry topic.
        self.retry_subscription = True
        #: With nothing cached, a filtered or empty pull moves the stored offset on (Java correctTagsOffset).
        self.advance_offset_when_idle = True
        self.running = False
        self.paused = False
        self._resetting = asyncio.Lock()
        self.started_at = 0
        self.rebalancer = Rebalancer(self)
        self._instance: ClientInstance | None = None
        self._offset_store: OffsetStore | None = None

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

    def subscribe(self, topic: str, expression: str | MessageSelector) -> None:
        wire = wrap_namespace(self.config.namespace, topic)
        self.subscriptions[wire] = Subscription.parse(wire, expression)
        if self.running:
            self.instance.rebalance_now()

    def unsubscribe(self, topic: str) -> None:
        self.subscriptions.pop(wrap_namespace(self.config.namespace, topic), None)

    def assign(self, queues: list[MessageQueue]) -> None:
        """Own exactly these queues from now on, subscribing to their topics with ``*``."""
        wrapped = {
            MessageQueue(wrap_namespace(self.config.namespace, q.topic), q.broker_name, q.queue_id)
            for q in queues
        }
        self.assigned = wrapped
        for mq in wrapped:
            self.subscriptions.setdefault(mq.topic, Subscription.parse(mq.topic, "*"))
        if self.running:
            self.instance.rebalance_now()

    def assigned_queues(self, topic: str) -> set[MessageQueue] | None:
        """The queues of ``topic`` fixed by ``assign``; None: rebalance decides."""
        if self.assigned is None:
            return None
        return {mq for mq in self.assigned if mq.topic == topic}

    # --- lifecycle ----------------------------------------------------------------------------------

    def register(self) -> None:
        """Start's first step: the shared client instance, the offset store, the group's registration."""
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

    async def join(self) -> None:
        """Start's second step: start the instance, fetch the subscribed routes, heartbeat every broker."""
        instance = self.instance
        await instance.start()
        for topic in self.subscriptions:
            try:
                await instance.update_route(topic)
            except MQClientError:
                raise
            except Exception as exc:
                log.warning("route of %s not available yet: %s", topic, exc)
        await self.check_selectors()
        await instance.heartbeat_all()

    async def check_selectors(self) -> None:
        """Ask a broker of each topic subscribed with an SQL92 selector whether it can evaluate it (Java's
        checkClientInBroker): a broker without enablePropertyFilter then fails ``start`` with its reason,
        instead of refusing every pull behind the user's back."""
        instance = self.instance
        for topic, sub in self.subscriptions.items():
            if sub.expression_type == TAG:
                continue
            route = instance.routes.get(topic)
            names = sorted(route.brokers) if route is not None else []
            addr = next((a for a in map(instance.master_addr, names) if a is not None), None)
            if addr is None:
                continue
            conn = await instance.connection(addr)
            try:
                await api.check_client_config(
                    conn, self.group, instance.client_id, sub.to_json(topic), self.config.call_timeout_s
                )
            except api.BrokerError as exc:
                raise MQClientError(
                    f"broker {addr} refuses the {sub.expression_type} selector {sub.expression!r} of "
                    f"group {self.group} on topic {topic!r}: {exc.remark}"
                ) from exc

    async def stop_pulling(self) -> None:
        """Shutdown's first step: no more pulls or rebalances; the process queues keep what they hold."""
        self.running = False
        await self.rebalancer.stop_pulling()

    async def release_queues(self) -> None:
        """Shutdown, once consumption has drained: persist the offsets, drop the queues, unlock them."""
        mqs = set(self.rebalancer.process_queues)
        await self.offset_store.persist_all(mqs)
        self.rebalancer.drop_all()
        if self.orderly and self.message_model is MessageModel.CLUSTERING:
            await self.rebalancer.unlock(list(mqs))

    async def unregister(self) -> None:
        await self.instance.unregister(self.group, producer=False)

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

    # --- what the client instance asks (instance.ConsumerHooks) --------------------------------------

    def heartbeat_data(self) -> dict[str, Any]:
        return {
            "groupName": self.group,
            "consumeType": self.consume_type,
            "messageModel": self.message_model.value,
            "consumeFromWhere": self.consume_from_where.value,
            "unitMode": False,
            "subscriptionDataSet": [sub.to_json(topic) for topic, sub in self.subscriptions.items()],
        }

    def subscribed_topics(self) -> set[str]:
        return set(self.subscriptions)

    async def rebalance(self) -> None:
        if self.running:
            async with self._resetting:  # a queue started mid-reset would read its old offset
                await self.rebalancer.rebalance()

    async def persist_offsets(self) -> None:
        await self.offset_store.persist_all(set(self.rebalancer.process_queues))

    def queue_offsets(self, topic: str) -> dict[MessageQueue, int]:
        return self.offset_store.offsets(topic)

    async def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: drop the named queues, set their new offsets, persist, start again.

        Only the queues the request names, as in Java's ``resetOffset``: each broker of a topic sends its
        own queues, and dropping the others would restart them mid-way from a stale stored offset. No
        rebalance runs until the new offsets are stored, since a queue started meanwhile reads the old one.
        """
        named = {mq: offset for mq, offset in offsets.items() if mq.topic == topic}
        async with self._resetting:
            for mq, offset in named.items():
                self.rebalancer.forget(mq)
                self.offset_store.update(mq, offset)
            for mq in named:
                await self.offset_store.persist(mq)
        self.instance.rebalance_now()

    async def consume_directly(self, msg: MessageExt) -> dict[str, Any]:
        """CONSUME_MESSAGE_DIRECTLY: answered by the owning consumer."""
        return await self._consume_directly(msg)

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


class CoreView:
    """What push and lite pull consumers show of the core they hold, and the calls both pass on to it
    unchanged (one definition)."""

    __slots__ = ()
    core: ConsumerCore

    @property
    def group(self) -> str:
        return self.core.group

    @property
    def config(self) -> ClientConfig:
        return self.core.config

    @property
    def message_model(self) -> MessageModel:
        return self.core.message_model

    @property
    def subscriptions(self) -> dict[str, Subscription]:
        return self.core.subscriptions

    @property
    def rebalancer(self) -> Rebalancer:
        return self.core.rebalancer

    @property
    def instance(self) -> ClientInstance:
        return self.core.instance

    @property
    def offset_store(self) -> OffsetStore:
        return self.core.offset_store

    @property
    def running(self) -> bool:
        return self.core.running

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Subscribe to ``topic`` with a tag expression (``*``, ``TagA`` or ``TagA || TagB``) or a
        ``MessageSelector`` (``MessageSelector.sql("a > 5")``); rebalance shares its queues in the group.
        A malformed SQL92 expression raises ValueError here."""
        self.core.subscribe(topic, expression)

    def unsubscribe(self, topic: str) -> None:
        self.core.unsubscribe(topic)

    def pause(self) -> None:
        self.core.paused = True

    def resume(self) -> None:
        self.core.paused = False
