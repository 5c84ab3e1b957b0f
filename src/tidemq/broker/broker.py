"""The broker process: wires the store, the registries and the processors, and talks to name servers."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
import zlib
from pathlib import Path
from typing import Any

import orjson

from tidemq import loop_monitor
from tidemq.acl import AclWatcher
from tidemq.aio import cancel_and_wait
from tidemq.broker.acl import AclService
from tidemq.broker.clients import ClientManager
from tidemq.broker.config import BrokerConfig
from tidemq.broker.locks import RebalanceLockManager
from tidemq.broker.long_polling import PullHoldService
from tidemq.broker.metadata import SubscriptionGroupTable, TopicConfig, TopicConfigTable
from tidemq.broker.offsets import OffsetTable
from tidemq.broker.processors import register_all
from tidemq.broker.processors.pull import pull_message
from tidemq.broker.pull_stats import PulledPerMinute
from tidemq.broker.schedule import ScheduleService
from tidemq.broker.timers import TimerService, recovered_tags_code
from tidemq.broker.topics import TopicManager
from tidemq.broker.transactions import TransactionService
from tidemq.histogram import LatencyHistogram
from tidemq.record import MessageExt, Prop, encode_properties, encode_record, pack_host, tag_hash
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.names import SCHEDULE_TOPIC, TIMER_TOPIC
from tidemq.remoting.transport import (
    RemotingConnection,
    RemotingError,
    RemotingServer,
    RequestDispatcher,
    connect,
)
from tidemq.store import MessageStore, PopStore, StoreConfig
from tidemq.store.requests import AppendRequest, record_keys

log = logging.getLogger(__name__)


class Broker:
    def __init__(
        self, config: BrokerConfig, store_config: StoreConfig, *, acl: AclWatcher | None = None
    ) -> None:
        """``acl``: the rules of ``config.acl_file`` already watched by the caller (``tidemq server`` shares
        one watcher with nsqd); without it the broker watches the file itself."""
        self.config = config
        self.started_at = time.time()
        # The scheduler comes first: store recovery asks it for the delivery time of delayed messages.
        self.schedule = ScheduleService(self)
        self.store = MessageStore(store_config, self._recovered_tags_code)
        #: The pop-style consumption state of 5.x (gRPC) consumer groups, beside the store.
        self.pop = PopStore.for_store(store_config)
        documents = self.store.documents("config")
        self.topics = TopicManager(
            TopicConfigTable(documents.path("topics.json")), config, self.topic_changed
        )
        self.groups = SubscriptionGroupTable(documents.path("subscriptionGroup.json"))
        self.consumer_offsets = OffsetTable(documents.path("consumerOffset.json"), "offsetTable")
        self.delay_offsets = OffsetTable(documents.path("delayOffset.json"), "offsetTable")
        self.store.topic_deleted_listeners.append(self.consumer_offsets.remove_topic)
        self.clients = ClientManager(config.channel_expiry_s)
        self.locks = RebalanceLockManager(config.lock_max_live_s)
        self.holds = PullHoldService(self._rerun_pull)
        self.transactions = TransactionService(self)
        self.timers = TimerService(self)
        self.store.dispatch_listeners += [
            self.holds.notify,
            self.schedule.on_dispatch,
            self.timers.on_dispatch,
        ]
        #: Filled by the send and pull processors, read by ``/metrics`` (broker/metrics.py).
        self.send_latency = LatencyHistogram()
        self.pull_latency = LatencyHistogram()
        self.dispatcher = RequestDispatcher()
        register_all(self.dispatcher, self)
        if acl is not None:
            self.acl: AclService | None = AclService(acl, owned=False)
        else:
            self.acl = AclService(AclWatcher(Path(config.acl_file))) if config.acl_file else None
        if self.acl is not None:
            self.dispatcher.add_guard(self.acl.guard)
        self.server = RemotingServer(
            self.dispatcher,
            config.listen_host,
            config.port,
            idle_timeout=config.idle_timeout_s,
            on_close=self._connection_closed,
            limits=config.connection_limits,
            slow_peer_timeout_s=config.slow_peer_timeout_s,
        )
        #: Bytes behind the log's end still counted as in memory (Java: RAM x accessMessageInMemoryMaxRatio).
        self.memory_for_messages = _physical_memory() * config.access_message_in_memory_max_ratio // 100
        self.store_host = b""
        self.stats: dict[str, int] = {"put": 0, "get": 0}
        self.pulled = PulledPerMinute()
        self._namesrv_conns: dict[str, RemotingConnection] = {}
        #: Topics changed since they were last registered, and the task registering them (see topic_changed).
        self._changed_topics: dict[str, TopicConfig] = {}
        self._increment_task: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def _rerun_pull(self, conn: RemotingConnection, req: RemotingCommand) -> RemotingCommand | None:
        return pull_message(self, conn, req, allow_suspend=False)

    def _recovered_tags_code(self, topic: str, queue_id: int, props: dict[str, str], store_ts: int) -> int:
        if topic == SCHEDULE_TOPIC:
            return self.schedule.tags_code(queue_id + 1, store_ts)
        if topic == TIMER_TOPIC:
            return recovered_tags_code(props)
        return tag_hash(props.get(Prop.TAGS))

    # --- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        await self.store.start()
        await self.pop.start()
        await self.server.start()
        self.config.port = self.server.port
        host, port = self.config.advertised_addr.rsplit(":", 1)
        self.store_host, _ = pack_host(host.strip("[]"), int(port))
        self.schedule.start()
        self.transactions.start()
        self.timers.start()
        if self.acl is not None:
            self.acl.start()
        self._tasks = [
            asyncio.create_task(self._registration_loop()),
            asyncio.create_task(self._expire_clients_loop()),
            asyncio.create_task(self._persist_offsets_loop()),
        ]
        log.info(
            "broker %s listening on %s:%d (advertised %s)",
            self.config.broker_name,
            self.config.listen_host,
            self.server.port,
            self.config.advertised_addr,
        )

    async def close(self) -> None:
        await cancel_and_wait(self._tasks)
        if self._increment_task is not None:
            await cancel_and_wait([self._increment_task])
        await self._unregister_all()
        self.topics.table.close()
        self.groups.close()
        await self.schedule.close()
        await self.transactions.close()
        await self.timers.close()
        if self.acl is not None:
            await self.acl.close()
        await self.server.close()
        self.consumer_offsets.persist(force=True)
        self.delay_offsets.persist(force=True)
        await self.pop.close()
        await self.store.close()

    # --- message building ---------------------------------------------------------------------------

    def make_append(
        self,
        *,
        topic: str,
        queue_id: int,
        body: bytes,
        flag: int,
        properties: dict[str, str],
        sys_flag: int,
        born_timestamp: int,
        born_host: bytes,
        reconsume_times: int = 0,
        schedule: bool = True,
    ) -> AppendRequest:
        """Build a stored record, moving a delayed message to its schedule queue
        (docs/protocols/rocketmq-messages.md#send-path step 5) unless ``schedule`` is off (a delivery from
        that queue keeps its DELAY, as Java's does)."""
        store_ts = int(time.time() * 1000)
        properties[Prop.CLUSTER] = self.config.cluster_name
        delay = properties.get(Prop.DELAY, "")
        tags_code: int
        if schedule and delay.isdigit() and int(delay) > 0 and topic != SCHEDULE_TOPIC:
            level = min(int(delay), len(self.schedule.delays_ms))
            properties[Prop.DELAY] = str(level)
            properties[Prop.REAL_TOPIC] = topic
            properties[Prop.REAL_QID] = str(queue_id)
            topic, queue_id = SCHEDULE_TOPIC, level - 1
            tags_code = self.schedule.tags_code(level, store_ts)
        else:
            tags_code = tag_hash(properties.get(Prop.TAGS))
        record = encode_record(
            topic=topic,
            queue_id=queue_id,
            body=body,
            properties=encode_properties(properties),
            flag=flag,
            sys_flag=sys_flag,
            born_timestamp=born_timestamp,
            born_host=born_host,
            store_timestamp=store_ts,
            store_host=self.store_host,
            reconsume_times=reconsume_times,
        )
        return AppendRequest(record, topic, queue_id, tags_code, record_keys(properties))

    def make_append_again(
        self,
        msg: MessageExt,
        *,
        topic: str,
        queue_id: int,
        properties: dict[str, str],
        reconsume_times: int,
        schedule: bool = True,
    ) -> AppendRequest:
        """Store a stored message again under another topic and queue (retry, dead letter, delivery)."""
        return self.make_append(
            topic=topic,
            queue_id=queue_id,
            body=msg.body,
            flag=msg.flag,
            properties=properties,
            sys_flag=msg.sys_flag,
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host_raw,
            reconsume_times=reconsume_times,
            schedule=schedule,
        )

    # --- client housekeeping ------------------------------------------------------------------------

    def _connection_closed(self, conn: RemotingConnection) -> None:
        self.holds.connection_closed(conn)
        for group in self.clients.connection_closed(conn):
            self.clients.notify_ids_changed(group)

    async def _expire_clients_loop(self) -> None:
        interval = min(10.0, self.config.channel_expiry_s / 4)
        while True:
            await asyncio.sleep(interval)
            for conn in self.clients.expired_connections():
                log.warning(
                    "client connection %s expired: no heartbeat for %.0fs",
                    conn.address,
                    self.config.channel_expiry_s,
                )
                conn.close()
                self._connection_closed(conn)

    async def _persist_offsets_loop(self) -> None:
        """Offsets are written as often as the store flushes its consume queues."""
        while True:
            await asyncio.sleep(self.store.config.cq_flush_interval_ms / 1000)
            try:
                await self.consumer_offsets.persist_off_loop()
                await self.delay_offsets.persist_off_loop()
            except OSError as exc:
                log.error("broker: persisting offsets failed: %s", exc)

    # --- name-server registration -------------------------------------------------------------------

    def topic_changed(self, config: TopicConfig) -> None:
        """Register a created or updated topic with the name servers, alone (Java's
        registerIncrementBrokerData): they keep this broker's route for every other topic, so a create
        costs the same with 10 topics or 10,000. Changes made while one registration is on the wire go
        together in the next (Java's list form)."""
        self._changed_topics[config.topic_name] = config
        if self._increment_task is None or self._increment_task.done():
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop yet: the first full registration carries the topic
                return
            self._increment_task = loop.create_task(self._register_changed_topics())

    async def _register_changed_topics(self) -> None:
        while self._changed_topics:
            changed, self._changed_topics = self._changed_topics, {}
            await self._register(self._registration_body(changed))

    async def topics_registered(self) -> None:
        """Wait until every topic changed so far is known to the name servers."""
        task = self._increment_task
        if task is not None and not task.done():
            await asyncio.shield(task)

    def topic_config_wrapper(self, topics: dict[str, TopicConfig] | None = None) -> dict[str, Any]:
        """Java's TopicConfigSerializeWrapper: what name servers and GET_ALL_TOPIC_CONFIG are given, with
        every topic or only ``topics`` (an increment)."""
        chosen = self.topics.all() if topics is None else topics
        return {
            "dataVersion": self.topics.table.data_version.to_json(),
            "topicConfigTable": {name: cfg.to_json() for name, cfg in chosen.items()},
        }

    def registration_body(self) -> bytes:
        return self._registration_body(None)

    def _registration_body(self, topics: dict[str, TopicConfig] | None) -> bytes:
        return orjson.dumps(
            {"filterServerList": [], "topicConfigSerializeWrapper": self.topic_config_wrapper(topics)}
        )

    def _broker_header(self) -> dict[str, str]:
        host, port = self.config.advertised_addr.rsplit(":", 1)
        return {
            "brokerName": self.config.broker_name,
            "brokerAddr": self.config.advertised_addr,
            "clusterName": self.config.cluster_name,
            "brokerId": str(self.config.broker_id),
            "haServerAddr": f"{host}:{int(port) + 1}",
        }

    async def _namesrv(self, addr: str) -> RemotingConnection:
        conn = self._namesrv_conns.get(addr)
        if conn is None or conn.is_closed:
            host, port = addr.rsplit(":", 1)
            conn = await connect(host, int(port))
            self._namesrv_conns[addr] = conn
        return conn

    async def register_all(self) -> None:
        await self._register(self.registration_body())

    async def _register(self, body: bytes) -> None:
        ext = self._broker_header() | {"compressed": "false", "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF)}
        for addr in self.config.namesrv_addrs:
            try:
                conn = await self._namesrv(addr)
                resp = await conn.invoke(
                    RemotingCommand(RequestCode.REGISTER_BROKER, ext_fields=dict(ext), body=body), timeout=6.0
                )
                if resp.code != ResponseCode.SUCCESS:
                    log.warning("name server %s refused registration: %s", addr, resp.remark)
            except RemotingError as exc:
                log.warning("cannot register with name server %s: %s", addr, exc)

    async def _registration_loop(self) -> None:
        while True:
            await self.register_all()
            await asyncio.sleep(self.config.register_interval_s)

    async def _unregister_all(self) -> None:
        for addr in self.config.namesrv_addrs:
            try:
                conn = await self._namesrv(addr)
                await conn.invoke(
                    RemotingCommand(RequestCode.UNREGISTER_BROKER, ext_fields=self._broker_header()),
                    timeout=3.0,
                )
            except RemotingError as exc:
                log.info("cannot unregister from name server %s: %s", addr, exc)
        for conn in self._namesrv_conns.values():
            conn.close()

    def runtime_info(self) -> dict[str, Any]:
        return {
            "brokerVersionDesc": "V4_9_8",
            "brokerVersion": "409",
            "msgPutTotalTodayNow": str(self.stats["put"]),
            "msgGetTotalTodayNow": str(self.stats["get"]),
            "commitLogMinOffset": str(self.store.commitlog.min_offset),
            "commitLogMaxOffset": str(self.store.commitlog.max_offset),
            "bootTimestamp": str(int(self.started_at * 1000)),
            "runtime": f"[ {int(time.time() - self.started_at)} seconds ]",
            "putMessageDistributeTime": "",
            "pullHeldCount": str(self.holds.held_count),
            "loopLagMaxMs": str(round(loop_monitor.MONITOR.worst_ms)),
            "brokerActive": "true",
            **disk_use(self.store.commitlog.directory),
        }


def disk_use(directory: Path) -> dict[str, str]:
    """Java's commitLogDiskRatio (used share of the partition holding the commit log, what the disk
    cleaning thresholds compare against) and commitLogDirCapacity; consume queues share the data dir."""
    try:
        usage = shutil.disk_usage(directory)
    except OSError:
        return {"commitLogDiskRatio": "-1", "consumeQueueDiskRatio": "-1"}
    ratio = str((usage.total - usage.free) / usage.total if usage.total else -1)
    capacity = f"Total : {usage.total / 2**30:.1f} GiB, Free : {usage.free / 2**30:.1f} GiB."
    return {"commitLogDiskRatio": ratio, "consumeQueueDiskRatio": ratio, "commitLogDirCapacity": capacity}


def _physical_memory() -> int:
    """The machine's RAM in bytes (Java's StoreUtil.TOTAL_PHYSICAL_MEMORY_SIZE)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
