"""nsqd-compatible server on tidemq's store: topics, channels, publishing, timers, persistence.

Unlike nsqd, a publish is answered only once the store holds it (and, with sync flush, has fsynced it),
and channel cursors are persisted, so an acknowledged PUB survives a crash and a message that was not
FINed is delivered again after a restart.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from tidemq.aio import cancel_and_wait
from tidemq.nsq.channel import PROP_DEFER, PROP_TIMESTAMP, STORE_PREFIX, Channel, Topic
from tidemq.nsq.config import NsqdConfig
from tidemq.nsq.connection import NsqConnection
from tidemq.nsq.protocol import NSQError
from tidemq.remoting.message import encode_properties, encode_record
from tidemq.store import FlushMode, MessageStore, StoreError
from tidemq.store.message_store import AppendRequest
from tidemq.store.metadata import read_json, write_json_atomic

log = logging.getLogger(__name__)
PERSIST_INTERVAL_S = 1.0


class Nsqd:
    def __init__(self, config: NsqdConfig, store: MessageStore) -> None:
        self.config = config
        self.store = store
        self.topics: dict[str, Topic] = {}
        self.connections: set[NsqConnection] = set()
        self.started_at = time.time()
        self._meta_path = Path(store.config.data_dir) / "nsq" / "nsqd.json"
        self._server: asyncio.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._load()

    @property
    def auth_required(self) -> bool:
        return bool(self.config.auth_http_addresses)

    @property
    def tcp_port(self) -> int:
        return self.config.tcp_port

    # --- persistence ----------------------------------------------------------------------------------

    def _load(self) -> None:
        data = read_json(self._meta_path, {})
        for item in data.get("topics") or []:
            topic = self._new_topic(item["name"])
            topic.paused = bool(item.get("paused"))
            topic.backlog_offset = int(item.get("backlog", 0))
            for ch in item.get("channels") or []:
                pending = {int(o): int(a) for o, a in (ch.get("pending") or {}).items()}
                channel = Channel(topic, ch["name"], int(ch.get("next", 0)), pending)
                channel.paused = bool(ch.get("paused"))
                topic.channels[channel.name] = channel
        known = {t.store_topic for t in self.topics.values()}
        for orphan in self.store.topic_names():
            if orphan.startswith(STORE_PREFIX) and orphan not in known:
                log.info("nsqd: dropping %s left by an ephemeral topic", orphan)
                self.store.delete_topic(orphan)

    def persist(self) -> None:
        topics = [t.snapshot() for t in self.topics.values() if not t.ephemeral]
        write_json_atomic(self._meta_path, {"topics": topics, "version": "1.3.0"})

    # --- topics and channels --------------------------------------------------------------------------

    def _new_topic(self, name: str) -> Topic:
        topic = Topic(name, self.store)
        self.topics[name] = topic
        return topic

    def topic(self, name: str) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            topic = self._new_topic(name)
            topic.backlog_offset = topic.end_offset
            log.info("nsqd: topic %s created", name)
        return topic

    def subscribe(self, topic_name: str, channel_name: str, client: NsqConnection) -> Channel:
        topic = self.topic(topic_name)
        channel = topic.channel(channel_name)
        if self.config.max_channel_consumers and len(channel.clients) >= self.config.max_channel_consumers:
            raise NSQError("E_SUB_FAILED", f"channel consumers for {topic_name}:{channel_name} exceeds limit")
        channel.add_client(client)
        return channel

    def unsubscribe(self, channel: Channel, client: NsqConnection) -> None:
        channel.remove_client(client)
        if channel.ephemeral and not channel.clients:
            self.delete_channel(channel.topic.name, channel.name)

    def delete_channel(self, topic_name: str, channel_name: str) -> bool:
        topic = self.topics.get(topic_name)
        if topic is None or topic.remove_channel(channel_name) is None:
            return False
        if topic.ephemeral and not topic.channels:
            self.delete_topic(topic_name)
        return True

    def delete_topic(self, name: str) -> bool:
        topic = self.topics.pop(name, None)
        if topic is None:
            return False
        for channel_name in list(topic.channels):
            topic.remove_channel(channel_name)
        self.store.delete_topic(topic.store_topic)
        return True

    # --- publishing -----------------------------------------------------------------------------------

    async def publish(
        self, topic_name: str, bodies: list[bytes], *, defer_ms: int = 0, error_code: str = "E_PUB_FAILED"
    ) -> None:
        """Store the messages; return once they are durable as the store's flush mode defines it."""
        topic = self.topic(topic_name)
        now = time.time()
        props = {PROP_TIMESTAMP: str(time.time_ns())}
        if defer_ms > 0:
            props[PROP_DEFER] = str(defer_ms)
        encoded = encode_properties(props)
        requests = [
            AppendRequest(
                encode_record(
                    topic=topic.store_topic,
                    queue_id=0,
                    body=body,
                    properties=encoded,
                    born_timestamp=int(now * 1000),
                    store_timestamp=int(now * 1000),
                ),
                topic.store_topic,
                0,
                0,
            )
            for body in bodies
        ]
        try:
            result = self.store.put(requests)
            if self.store.config.flush_mode is FlushMode.SYNC:
                await self.store.wait_durable(result.end_offset)
        except StoreError as exc:
            raise NSQError(error_code, f"{error_code[2:].replace('_', ' ')} {exc}") from None
        if not topic.channels:
            return
        if topic.ephemeral:
            for channel in topic.channels.values():
                channel.drop_overflow(self.config.mem_queue_size)
        topic.pump()

    # --- lifecycle ------------------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: NsqConnection(self), self.config.tcp_host, self.config.tcp_port, reuse_address=True
        )
        self.config.tcp_port = self._server.sockets[0].getsockname()[1]
        self._tasks = [asyncio.create_task(self._scan_loop()), asyncio.create_task(self._persist_loop())]
        for topic in self.topics.values():
            topic.pump()
        log.info("nsqd listening on %s:%d", self.config.tcp_host, self.config.tcp_port)

    async def _scan_loop(self) -> None:
        interval = self.config.queue_scan_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            for topic in list(self.topics.values()):
                for channel in list(topic.channels.values()):
                    channel.process_timers()

    async def _persist_loop(self) -> None:
        while True:
            await asyncio.sleep(PERSIST_INTERVAL_S)
            try:
                self.persist()
            except OSError as exc:
                log.error("nsqd: persisting topic and channel state failed: %s", exc)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        await cancel_and_wait(self._tasks)
        if self._server is not None:
            await self._server.wait_closed()
        self.persist()
