"""The client instance (Java MQClientInstance): one per instance name, shared by producers and consumers.

It owns the connections to name servers and brokers, the topic routes (refreshed every 30 s), the
heartbeats to every broker (every 30 s), the timers that persist offsets and rebalance, and the
answers to requests brokers send to clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import orjson

from tidemq.address import split_host_port
from tidemq.aio import cancel_and_wait
from tidemq.client import api
from tidemq.client.config import ClientConfig
from tidemq.client.message_queue import MessageQueue
from tidemq.client.replies import ReplyWaiters
from tidemq.client.route import TopicRoute
from tidemq.record import MessageExt, Prop, iter_records
from tidemq.remoting import jsonx
from tidemq.remoting.acl_signature import sign_request
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.route import MASTER_ID
from tidemq.remoting.transport import RemotingConnection, RemotingError, RequestHook, connect

log = logging.getLogger(__name__)
T = TypeVar("T")
REBALANCE_INTERVAL_S = 20.0


class MQClientError(Exception):
    """A client-side failure with a clear cause (no route, name server unreachable, message too large)."""


class ConsumerHooks(Protocol):
    """What the instance needs from a consumer it serves."""

    group: str

    def heartbeat_data(self) -> dict[str, Any]: ...

    def subscribed_topics(self) -> set[str]: ...

    async def rebalance(self) -> None: ...

    async def persist_offsets(self) -> None: ...

    def running_info(self) -> dict[Any, Any]: ...

    async def consume_directly(self, msg: MessageExt) -> dict[str, Any]: ...

    async def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None: ...

    def queue_offsets(self, topic: str) -> dict[MessageQueue, int]: ...


class ProducerHooks(Protocol):
    group: str

    def published_topics(self) -> set[str]: ...


class ClientInstance:
    _registry: dict[tuple[str, int], ClientInstance] = {}

    @classmethod
    def get(cls, config: ClientConfig) -> ClientInstance:
        """The instance for this client id on the running loop, created on first use."""
        key = (config.client_id, id(asyncio.get_running_loop()))
        instance = cls._registry.get(key)
        if instance is None or instance._closed:
            instance = cls._registry[key] = cls(config)
        return instance

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self.client_id = config.client_id
        self.routes: dict[str, TopicRoute] = {}
        self.brokers: dict[str, dict[int, str]] = {}
        self.producers: dict[str, ProducerHooks] = {}
        self.consumers: dict[str, ConsumerHooks] = {}
        self._conns: dict[str, RemotingConnection] = {}
        self._conn_locks: dict[str, asyncio.Lock] = {}
        self._namesrv_index = 0
        self._rebalance_now = asyncio.Event()
        #: Requests of this client's producers waiting for their reply (Producer.request).
        self.replies = ReplyWaiters()
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        self._closed = False

    # --- lifecycle ------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        self._tasks = [
            asyncio.create_task(self._every(self.config.poll_name_server_interval_s, self.refresh_routes)),
            asyncio.create_task(self._every(self.config.heartbeat_broker_interval_s, self.heartbeat_all)),
            asyncio.create_task(
                self._every(self.config.persist_consumer_offset_interval_s, self._persist_all)
            ),
            asyncio.create_task(self._rebalance_loop()),
        ]

    async def _every(self, interval: float, job: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await job()
            except Exception:
                log.exception("client %s: periodic %s failed", self.client_id, getattr(job, "__name__", job))

    async def _rebalance_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(REBALANCE_INTERVAL_S):
                    await self._rebalance_now.wait()
            self._rebalance_now.clear()
            for consumer in list(self.consumers.values()):
                try:
                    await consumer.rebalance()
                except Exception:
                    log.exception("rebalance of group %s failed", consumer.group)

    def rebalance_now(self) -> None:
        self._rebalance_now.set()

    async def _persist_all(self) -> None:
        for consumer in list(self.consumers.values()):
            await consumer.persist_offsets()

    def register_producer(self, producer: ProducerHooks) -> None:
        if producer.group in self.producers:
            raise MQClientError(
                f"producer group {producer.group!r} is already started in client {self.client_id}"
            )
        self.producers[producer.group] = producer

    def register_consumer(self, consumer: ConsumerHooks) -> None:
        if consumer.group in self.consumers:
            raise MQClientError(
                f"consumer group {consumer.group!r} is already started in client {self.client_id}"
            )
        self.consumers[consumer.group] = consumer

    async def unregister(self, group: str, *, producer: bool) -> None:
        """Forget a producer or consumer, tell every broker, and shut down when nothing is left."""
        (self.producers if producer else self.consumers).pop(group, None)
        for addr in self.all_broker_addrs():
            try:
                conn = await self.connection(addr)
                await api.unregister_client(
                    conn,
                    self.client_id,
                    producer_group=group if producer else None,
                    consumer_group=None if producer else group,
                    timeout=self.config.call_timeout_s,
                )
            except (RemotingError, api.BrokerError) as exc:
                log.warning("unregister of %s from %s failed: %s", group, addr, exc)
        if not self.producers and not self.consumers:
            await self.close()

    async def close(self) -> None:
        self._closed = True
        await cancel_and_wait(self._tasks)
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    # --- connections ----------------------------------------------------------------------------------

    def _request_hook(self) -> RequestHook | None:
        """Every request is signed when credentials are set, name-server requests too (as Java's are)."""
        if self.config.credentials is None:
            return None
        access_key, secret_key = self.config.credentials
        return functools.partial(sign_request, access_key=access_key, secret_key=secret_key)

    async def connection(self, addr: str) -> RemotingConnection:
        conn = self._conns.get(addr)
        if conn is not None and not conn.is_closed:
            return conn
        lock = self._conn_locks.setdefault(addr, asyncio.Lock())
        async with lock:
            conn = self._conns.get(addr)
            if conn is None or conn.is_closed:
                host, port = split_host_port(addr)
                conn = await connect(
                    host,
                    port,
                    self._on_request,
                    timeout=self.config.call_timeout_s,
                    request_hook=self._request_hook(),
                )
                self._conns[addr] = conn
                if self.consumers and addr in self.all_broker_addrs():
                    # A restarted broker has forgotten our subscriptions: tell it now, not in 30 s.
                    try:
                        await api.heartbeat(conn, self.heartbeat_body(), self.config.call_timeout_s)
                    except (RemotingError, api.BrokerError) as exc:
                        log.warning("heartbeat to %s on reconnect failed: %s", addr, exc)
            return conn

    async def namesrv_call(self, call: Callable[[RemotingConnection], Awaitable[T]]) -> T:
        """Run ``call`` on a name server, moving to the next one when it cannot be reached."""
        addrs = self.config.namesrv_addrs
        if not addrs:
            raise MQClientError("no name server address configured")
        errors = []
        for i in range(len(addrs)):
            addr = addrs[(self._namesrv_index + i) % len(addrs)]
            try:
                result = await call(await self.connection(addr))
            except RemotingError as exc:
                errors.append(f"{addr}: {exc}")
                continue
            self._namesrv_index = (self._namesrv_index + i) % len(addrs)
            return result
        raise MQClientError("name server unreachable: " + "; ".join(errors))

    # --- routes ---------------------------------------------------------------------------------------

    async def update_route(self, topic: str) -> TopicRoute | None:
        """Fetch a topic's route; None when the name server has none."""
        data = await self.namesrv_call(lambda conn: api.get_route(conn, topic, self.config.call_timeout_s))
        if data is None:
            return None
        route = TopicRoute.from_json(data)
        self.routes[topic] = route
        for name, broker in route.brokers.items():
            self.brokers.setdefault(name, {}).update(broker.addrs)
        return route

    async def route(self, topic: str) -> TopicRoute | None:
        return self.routes.get(topic) or await self.update_route(topic)

    async def refresh_routes(self) -> None:
        topics: set[str] = set()
        for producer in self.producers.values():
            topics |= producer.published_topics()
        for consumer in self.consumers.values():
            topics |= consumer.subscribed_topics()
        for topic in topics:
            try:
                await self.update_route(topic)
            except (MQClientError, RemotingError, api.BrokerError) as exc:
                log.warning("route refresh for %s failed: %s", topic, exc)

    def master_addr(self, broker_name: str) -> str | None:
        return self.brokers.get(broker_name, {}).get(MASTER_ID)

    def all_broker_addrs(self) -> list[str]:
        return sorted({addr for addrs in self.brokers.values() for addr in addrs.values()})

    def open_broker_connection(self, broker_name: str) -> RemotingConnection | None:
        """The connection to ``broker_name``'s master if it is open now, without a wait; else None."""
        addr = self.master_addr(broker_name)
        conn = self._conns.get(addr) if addr is not None else None
        return conn if conn is not None and not conn.is_closed else None

    async def broker_connection(self, broker_name: str) -> RemotingConnection:
        addr = self.master_addr(broker_name)
        if addr is None:
            raise MQClientError(f"broker {broker_name!r} has no known master address")
        return await self.connection(addr)

    # --- heartbeats -----------------------------------------------------------------------------------

    def heartbeat_body(self) -> dict[str, Any]:
        return {
            "clientID": self.client_id,
            "producerDataSet": [{"groupName": g} for g in self.producers]
            + [{"groupName": "CLIENT_INNER_PRODUCER"}],
            "consumerDataSet": [c.heartbeat_data() for c in self.consumers.values()],
        }

    async def heartbeat_all(self) -> None:
        body = self.heartbeat_body()
        for name, addrs in list(self.brokers.items()):
            for broker_id, addr in addrs.items():
                if broker_id != MASTER_ID and not self.consumers:
                    continue
                try:
                    await api.heartbeat(await self.connection(addr), body, self.config.call_timeout_s)
                except (RemotingError, api.BrokerError) as exc:
                    log.warning("heartbeat to %s (%s) failed: %s", name, addr, exc)

    # --- requests from brokers ------------------------------------------------------------------------

    def _on_request(
        self, conn: RemotingConnection, req: RemotingCommand
    ) -> RemotingCommand | Awaitable[RemotingCommand | None] | None:
        if req.code == RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT:
            return self.replies.receive(req)
        group = req.ext_fields.get("consumerGroup") or req.ext_fields.get("group", "")
        consumer = self.consumers.get(group)
        if req.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            log.info("broker %s: consumers of %s changed, rebalancing now", conn.address, group)
            self.rebalance_now()
            return None
        if req.code == RequestCode.CHECK_TRANSACTION_STATE:
            self._check_transaction(conn, req)
            return None
        if req.code in (
            RequestCode.GET_CONSUMER_RUNNING_INFO,
            RequestCode.CONSUME_MESSAGE_DIRECTLY,
            RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
            RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT,
        ):
            if consumer is None:
                return req.error(
                    ResponseCode.SYSTEM_ERROR, f"the consumer group[{group}] not exist in {self.client_id}"
                )
            return self._serve_consumer_request(consumer, req)
        return req.error(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {req.code} not supported")

    def _check_transaction(self, conn: RemotingConnection, req: RemotingCommand) -> None:
        """Hand a broker's transaction check to the producer of the half message's group (its PGROUP)."""
        try:
            msg = next(iter_records(req.body))
        except (StopIteration, ValueError) as exc:
            log.warning("broker %s: unreadable transaction check: %s", conn.address, exc)
            return
        group = msg.properties.get(Prop.PGROUP, "")
        producer = self.producers.get(group)
        check = getattr(producer, "check_transaction_state", None)
        if check is None:
            log.warning(
                "broker %s: transaction check for group %r, which has no transaction producer here",
                conn.address,
                group,
            )
            return
        check(conn, msg, dict(req.ext_fields))

    async def _serve_consumer_request(
        self, consumer: ConsumerHooks, req: RemotingCommand
    ) -> RemotingCommand | None:
        if req.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            return req.response(body=jsonx.dumps_object_keys(consumer.running_info()))
        if req.code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
            msg = next(iter_records(req.body))
            msg.broker_name = req.ext_fields.get("brokerName", "")
            return req.response(body=orjson.dumps(await consumer.consume_directly(msg)))
        topic = req.ext_fields.get("topic", "")
        if req.code == RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT:
            offsets = consumer.queue_offsets(topic)
            table = {jsonx.object_key(**mq.to_json()): offset for mq, offset in offsets.items()}
            return req.response(body=jsonx.dumps_object_keys({"messageQueueTable": table}))
        await consumer.reset_offsets(topic, _parse_offset_table(req.body))
        return None


def _parse_offset_table(body: bytes | bytearray | memoryview) -> dict[MessageQueue, int]:
    """ResetOffsetBody in fastjson object-key form, or the C++ list form."""
    data = jsonx.loads(bytes(body)) if body else {}
    out: dict[MessageQueue, int] = {}
    if isinstance(data, list):
        for item in data:
            out[MessageQueue.from_json(item)] = int(item["offset"])
        return out
    for key, offset in (data.get("offsetTable") or {}).items():
        out[MessageQueue.from_json(dict(key) if isinstance(key, tuple) else orjson.loads(key))] = int(offset)
    return out
