"""nsqd-compatible server on tidemq's store: topics, channels, publishing, timers, persistence.

Unlike nsqd, a publish is answered only once the store holds it (and, with sync flush, has fsynced it),
and channel cursors are persisted, so an acknowledged PUB survives a crash and a message that was not
FINed is delivered again after a restart. FINs are journaled between snapshots of the channel state (see
``fin_journal``), so a finished message is not delivered again either.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from tidemq.acl import AclWatcher
from tidemq.aio import cancel_and_wait
from tidemq.connection_gate import ConnectionGate
from tidemq.nsq.http_server import HttpGuard, serve
from tidemq.nsq.nsqd import chunked_publish
from tidemq.nsq.nsqd.acl_auth import AccountsAuthenticator
from tidemq.nsq.nsqd.auth import Authenticates, Authenticator
from tidemq.nsq.nsqd.channel import (
    PROP_DEFER,
    PROP_TIMESTAMP,
    STORE_PREFIX,
    Channel,
    MemoryBudget,
)
from tidemq.nsq.nsqd.config import LOG_LEVEL_NUMBERS, NsqdConfig
from tidemq.nsq.nsqd.connection import NsqConnection
from tidemq.nsq.nsqd.fin_journal import FinJournal, channel_key, journal_files, replay
from tidemq.nsq.nsqd.http_api import make_app
from tidemq.nsq.nsqd.lookup_peer import LookupdRegistrar
from tidemq.nsq.nsqd.quantile import LatencySettings
from tidemq.nsq.nsqd.topic import Topic
from tidemq.nsq.protocol import VERSION, NSQError, is_ephemeral
from tidemq.record import LOOPBACK_HOST, build_uniform_batch, encode_properties
from tidemq.store import FlushMode, MessageStore, PutResult, StoreError
from tidemq.store.documents import JsonSnapshots, read_json

log = logging.getLogger(__name__)

#: How often the topic and channel state (metadata and channel cursors) is written, when it changed.
PERSIST_INTERVAL_S = 1.0


class Nsqd:
    def __init__(self, config: NsqdConfig, store: MessageStore, *, acl: AclWatcher | None = None) -> None:
        """``acl``: the rules of ``config.acl_file`` already watched by the caller (``tidemq server``
        shares one watcher with the broker); without it nsqd watches the file itself."""
        self.config = config
        self.store = store
        self.topics: dict[str, Topic] = {}
        #: Bytes waiting in every channel's memory, bounded per channel and in all.
        self.memory_budget = MemoryBudget(config.mem_queue_bytes, config.mem_queue_total_bytes)
        self.connections: set[NsqConnection] = set()
        #: The TCP port's connection caps (its idle timeout is the heartbeat's: two missed, closed).
        self.tcp_gate = ConnectionGate(config.connection_limits)
        self.started_at = time.time()
        #: Why the last disk write failed, for ``/ping``; cleared by the next good one.
        self.health_error = ""
        self.log_level = "info"
        self.ssl_context = _ssl_context(config)
        self.authenticator: Authenticates = Authenticator(
            config.auth_http_addresses,
            config.auth_http_request_method,
            config.http_client_connect_timeout_s,
            config.http_client_request_timeout_s,
        )
        if config.acl_file and not config.auth_http_addresses:
            # An auth server, when given, wins: it is the more specific choice for the NSQ side.
            if acl is not None:
                self.authenticator = AccountsAuthenticator(acl, owned=False)
            else:
                self.authenticator = AccountsAuthenticator(AclWatcher(Path(config.acl_file)))
        self._meta_path = Path(store.config.data_dir) / "nsq" / "nsqd.json"
        self._state_file = JsonSnapshots(self._meta_path)
        percentiles = tuple(config.e2e_processing_latency_percentiles)
        self._latency = (
            LatencySettings(percentiles, config.e2e_processing_latency_window_s) if percentiles else None
        )
        self._journal_dir = self._meta_path.parent / "fins"
        self.journal = FinJournal(
            self._journal_dir,
            0,
            sync=self.sync_flush,
            fsync_interval_s=store.config.flush_interval_ms / 1000,
        )
        self._server: asyncio.Server | None = None
        self._http: web.AppRunner | None = None
        self.registrar: LookupdRegistrar | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._load()

    @property
    def auth_required(self) -> bool:
        return self.authenticator.enabled

    @property
    def tcp_port(self) -> int:
        return self.config.tcp_port

    # --- persistence ----------------------------------------------------------------------------------

    def _load(self) -> None:
        """The last snapshot, with the FINs journaled since applied over it; then a new snapshot of that,
        so the journal starts afresh."""
        data = read_json(self._meta_path, {})
        first = int(data.get("fin_journal", 0))
        fins: dict[bytes, set[int]] = {}
        for key, offsets in replay(self._journal_dir, first):
            fins.setdefault(key, set()).update(offsets)
        for item in data.get("topics") or []:
            topic = self._new_topic(item["name"])
            topic.paused = bool(item.get("paused"))
            end = topic.end_offset
            topic.backlog_offset = min(int(item.get("backlog", 0)), end)
            topic.aborted = [(int(a), int(b)) for a, b in item.get("aborted") or ()]
            torn = item.get("mpubs") or {}
            for mpub_id, first in torn.items():
                chunked_publish.abort_torn(topic, mpub_id, int(first))
            for ch in item.get("channels") or []:
                journal_id = int(ch["id"]) if "id" in ch else None
                done = fins.get(channel_key(journal_id), set()) if journal_id is not None else set()
                pending = {int(o): int(a) for o, a in (ch.get("pending") or {}).items() if int(o) not in done}
                finished = done.union(int(o) for o in ch.get("finished") or ())
                cursor, pending = _within_log(
                    f"{topic.name}/{ch['name']}", int(ch.get("next", 0)), pending, end
                )
                channel = Channel(
                    topic,
                    ch["name"],
                    cursor,
                    pending,
                    journal_id=journal_id,
                    finished=(o for o in finished if o < end),
                )
                channel.paused = bool(ch.get("paused"))
                topic.channels[channel.name] = channel
        known = {t.store_topic for t in self.topics.values()}
        for orphan in self.store.topic_names():
            if orphan.startswith(STORE_PREFIX) and orphan not in known:
                log.info("nsqd: dropping %s left by an ephemeral or deleted topic", orphan)
                self.store.delete_topic(orphan)
        files = journal_files(self._journal_dir)
        self.journal.generation = max([first, *(number for number, _ in files)]) + 1
        torn_mpubs = any(item.get("mpubs") for item in data.get("topics") or [])
        if (
            files or torn_mpubs or (data and "fin_journal" not in data)
        ):  # the journal replayed, or channels given ids
            self.persist()

    def persist(self) -> None:
        """Write topic and channel state now, on the loop (at close, when a topic or channel appears or
        goes, when a pause must stick); the FIN journal before it is no longer needed."""
        generation = self.journal.rotate()
        self._state_file.write_now(self._state(generation))
        self.journal.drop_before(generation)

    def _persist_event(self, what: str) -> None:
        """Persist because a topic or channel appeared or went, as nsqd does: a topic must be known before
        its first message is stored (a topic missing from the state is dropped at start), and a channel
        before FINs are journaled for it. A failed write is retried by the periodic persist."""
        try:
            self.persist()
        except OSError as exc:
            self.health_error = f"persisting metadata failed: {exc}"
            log.error("nsqd: persisting topic and channel state after %s failed: %s", what, exc)

    def _state(self, journal_generation: int) -> dict[str, Any]:
        topics = [t.snapshot() for t in self.topics.values() if not t.ephemeral]
        return {"topics": topics, "fin_journal": journal_generation, "version": VERSION}

    @property
    def health_problem(self) -> str:
        """Why the last disk write (of the log, or of the FIN journal) failed; "" when all is well."""
        return self.health_error or self.journal.error

    # --- topics and channels --------------------------------------------------------------------------

    def _new_topic(self, name: str) -> Topic:
        topic = Topic(name, self.store, self.journal, self._latency, budget=self.memory_budget)
        topic.on_channel = lambda channel, created: self._channel_event(name, channel, created)
        self.topics[name] = topic
        return topic

    def _channel_event(self, topic: str, channel: str, created: bool) -> None:
        log.info("nsqd: channel %s/%s %s", topic, channel, "created" if created else "deleted")
        # A deleted topic's channels go with it: the topic's own deletion is saved once, after them.
        if topic in self.topics and not (is_ephemeral(topic) or is_ephemeral(channel)):
            self._persist_event(f"channel {topic}/{channel} was {'created' if created else 'deleted'}")
        if self.registrar is not None:
            (self.registrar.register if created else self.registrar.unregister)(topic, channel)

    def registrations(self) -> list[tuple[str, str | None]]:
        """What lookupd should know: each channel, or the bare topic while it has none."""
        found: list[tuple[str, str | None]] = []
        for name, topic in self.topics.items():
            found += [(name, ch) for ch in topic.channels] or [(name, None)]
        return found

    def existing_topic(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def topic(self, name: str) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            topic = self._new_topic(name)
            topic.backlog_offset = topic.end_offset
            log.info("nsqd: topic %s created", name)
            if not topic.ephemeral:
                self._persist_event(f"topic {name} was created")
            if self.registrar is not None:
                self.registrar.register(name)
        return topic

    def subscribe(self, topic_name: str, channel_name: str, client: NsqConnection) -> Channel:
        topic = self.topic(topic_name)
        channel = topic.channel(channel_name)
        if self.config.max_channel_consumers and len(channel.clients) >= self.config.max_channel_consumers:
            limit = self.config.max_channel_consumers
            raise NSQError(
                "E_SUB_FAILED",
                f"SUB failed consumers for {topic_name}:{channel_name} exceeds limit of {limit}",
            )
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
        if not topic.ephemeral:
            self._persist_event(f"topic {name} was deleted")
        if self.registrar is not None:
            self.registrar.unregister(name)
        return True

    # --- publishing -----------------------------------------------------------------------------------

    async def publish(
        self, topic_name: str, bodies: list[bytes], *, defer_ms: int = 0, error_code: str = "E_PUB_FAILED"
    ) -> None:
        """Store the messages; return once they are durable as the store's flush mode defines it. A big
        MPUB is stored in chunks that yield to the loop (nsqd/chunked_publish.py)."""
        if chunked_publish.is_big(bodies):
            await self._publish_chunked(topic_name, bodies, defer_ms, error_code)
            return
        end = self.append(topic_name, bodies, defer_ms=defer_ms, error_code=error_code)
        if self.sync_flush:
            await self.wait_durable(end, error_code)

    @property
    def sync_flush(self) -> bool:
        return self.store.config.flush_mode is FlushMode.SYNC

    async def _publish_chunked(
        self, topic_name: str, bodies: list[bytes], defer_ms: int, error_code: str
    ) -> None:
        """A big MPUB, all or nothing, in chunks with a yield after each; held from channels until every
        chunk is stored (durably, in sync flush), aborted if one fails or the task is cancelled."""
        topic = self.topic(topic_name)
        mpub_id = chunked_publish.new_mpub_id()
        topic.mpubs[mpub_id] = topic.end_offset
        stored: list[tuple[int, int]] = []
        size = 0  # summed chunk by chunk: one pass over millions of bodies would hold the loop 60 ms
        try:
            self.persist()  # durable before the first chunk: a crash from here on aborts it at start
            end = 0
            for chunk in chunked_publish.chunks(bodies):
                result, _ = self._store(
                    topic, chunk, defer_ms, error_code, {chunked_publish.PROP_MPUB: mpub_id}
                )
                stored.append((result.queue_offsets[0], result.queue_offsets[-1] + 1))
                end = result.end_offset
                size += sum(map(len, chunk))
                await chunked_publish.give_way()
            if self.sync_flush:
                await self.wait_durable(end, error_code)
        except BaseException as exc:
            del topic.mpubs[mpub_id]
            topic.aborted = chunked_publish.merge_ranges(topic.aborted + stored)
            self._persist_event("an MPUB failed midway")
            log.warning("nsqd: MPUB of %d to %s failed after %d chunks stored (skipped): %s",
                        len(bodies), topic.name, len(stored), exc)  # fmt: skip
            raise
        del topic.mpubs[mpub_id]
        self.persist()  # before the answer: a crash after it must not abort an acknowledged MPUB
        topic.message_count += len(bodies)
        topic.message_bytes += size
        topic.pump()

    def append(
        self, topic_name: str, bodies: list[bytes], *, defer_ms: int = 0, error_code: str = "E_PUB_FAILED"
    ) -> int:
        """Store the messages, durable or not yet (sync flush: see ``wait_durable``); returns how far the
        log must be durable for them. Consumers may see them at once, as Java's dispatch does."""
        topic = self.topic(topic_name)
        if not bodies:
            return 0
        result, now_ns = self._store(topic, bodies, defer_ms, error_code)
        now_ms = now_ns // 1_000_000
        topic.message_count += len(bodies)
        size = sum(map(len, bodies))
        topic.message_bytes += size
        if topic.channels and not topic.mpubs:
            first_new = result.queue_offsets[0]
            limit = self.config.mem_queue_size
            due_ms = now_ms + defer_ms if defer_ms > 0 else 0
            for channel in topic.channels.values():
                if channel.ephemeral:
                    channel.drop_overflow(first_new, first_new + len(bodies), limit)
                channel.take_published(first_new, now_ns, bodies, due_ms, limit, size)
            topic.pump()
        return result.end_offset

    def _store(
        self,
        topic: Topic,
        bodies: list[bytes],
        defer_ms: int,
        error_code: str,
        extra: dict[str, str] | None = None,
    ) -> tuple[PutResult, int]:
        """Encode and store ``bodies`` in one write; returns where, and their timestamp (ns)."""
        now_ns = time.time_ns()
        props = {PROP_TIMESTAMP: str(now_ns)}
        if defer_ms > 0:
            props[PROP_DEFER] = str(defer_ms)
        if extra:
            props.update(extra)
        properties = encode_properties(props)
        store_topic = topic.store_topic
        batch = build_uniform_batch(
            bodies,
            topic=store_topic,
            queue_id=0,
            properties=properties,
            timestamp=now_ns // 1_000_000,
            born_host=LOOPBACK_HOST,
            store_host=LOOPBACK_HOST,
        )
        try:
            result = self.store.put_batch(store_topic, 0, batch)
        except StoreError as exc:
            raise self._store_failed(exc, error_code) from None
        self.health_error = ""
        return result, now_ns

    async def wait_durable(self, end_offset: int, error_code: str = "E_PUB_FAILED") -> None:
        """Wait until the log is fsynced to ``end_offset`` (one fsync serves many publishes); callers ask
        only in sync flush, where an answer promises that."""
        try:
            await self.store.wait_durable(end_offset)
        except StoreError as exc:
            raise self._store_failed(exc, error_code) from None

    def _store_failed(self, exc: StoreError, error_code: str) -> NSQError:
        self.health_error = str(exc)
        return NSQError(error_code, f"{error_code[2:].replace('_', ' ')} {exc}")

    # --- administration (the HTTP API's verbs) ------------------------------------------------------

    def set_paused(self, topic: Topic, channel: Channel | None, paused: bool) -> None:
        target: Topic | Channel = channel if channel is not None else topic
        target.paused = paused
        if not paused:
            topic.pump()
        self.persist()

    # --- lifecycle ------------------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.authenticator.start()
        self._server = await loop.create_server(
            lambda: NsqConnection(self), self.config.tcp_host, self.config.tcp_port, reuse_address=True
        )
        self.config.tcp_port = self._server.sockets[0].getsockname()[1]
        if self.config.http_port is not None:
            guard = HttpGuard("nsqd http", self.config.connection_limits)
            self._http, self.config.http_port = await serve(
                make_app(self), self.config.tcp_host, self.config.http_port, guard
            )
        self.journal.start()
        self._tasks = [asyncio.create_task(self._scan_loop()), asyncio.create_task(self._persist_loop())]
        info = self.info()
        identity = {k: info[k] for k in ("version", "tcp_port", "http_port", "hostname", "broadcast_address")}
        self.registrar = LookupdRegistrar(self.config.lookupd_tcp_addresses, identity, self.registrations)
        await self.registrar.start()
        for topic in self.topics.values():
            topic.pump()
        log.info(
            "nsqd listening on %s:%d (http %s)",
            self.config.tcp_host,
            self.config.tcp_port,
            self.config.http_port,
        )

    async def _scan_loop(self) -> None:
        interval = self.config.queue_scan_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            for topic in list(self.topics.values()):
                for channel in list(topic.channels.values()):
                    channel.process_timers()

    async def _persist_loop(self) -> None:
        """The periodic persist: the snapshot is taken on the loop, the write and its fsync happen on a
        worker thread (so no request waits on the disk), and an unchanged state is not written again."""
        while True:
            await asyncio.sleep(PERSIST_INTERVAL_S)
            generation = self.journal.rotate_if_large()
            state = self._state(generation)
            if state == self._state_file.last:
                continue
            try:
                await self._state_file.write_off_loop(state)
            except OSError as exc:
                log.error("nsqd: persisting topic and channel state failed: %s", exc)
                continue
            self.journal.drop_before(generation)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        await cancel_and_wait(self._tasks)
        await self.journal.stop()  # connections waiting for their FINs get their last frames, and close
        if self.registrar is not None:
            await self.registrar.close()
        if self._http is not None:
            await self._http.cleanup()
        if self._server is not None:
            await self._server.wait_closed()
        await self.authenticator.close()
        self.persist()

    async def set_lookupd_addresses(self, addresses: list[str]) -> None:
        self.config.lookupd_tcp_addresses = list(addresses)
        if self.registrar is not None:
            await self.registrar.set_addresses(addresses)

    def option_values(self) -> dict[str, object]:
        """``GET /config/<opt>``: nsqd's option names; durations in nanoseconds as Go encodes them."""
        cfg = self.config
        ms = 1_000_000
        return {
            "nsqlookupd_tcp_addresses": cfg.lookupd_tcp_addresses,
            "log_level": LOG_LEVEL_NUMBERS[self.log_level],  # nsqd encodes its lg.LogLevel as a number
            "tcp_address": f"{cfg.tcp_host}:{cfg.tcp_port}",
            "http_address": f"{cfg.tcp_host}:{cfg.http_port}" if cfg.http_port is not None else "",
            "broadcast_address": cfg.broadcast_host,
            "data_path": str(self.store.config.data_dir),
            "mem_queue_size": cfg.mem_queue_size,
            "msg_timeout": cfg.msg_timeout_ms * ms,
            "max_msg_timeout": cfg.max_msg_timeout_ms * ms,
            "max_msg_size": cfg.max_msg_size,
            "max_body_size": cfg.max_body_size,
            "max_req_timeout": cfg.max_req_timeout_ms * ms,
            "client_timeout": cfg.client_timeout_ms * ms,
            "max_heartbeat_interval": cfg.max_heartbeat_interval_ms * ms,
            "max_rdy_count": cfg.max_rdy_count,
            "max_output_buffer_size": cfg.max_output_buffer_size,
            "max_output_buffer_timeout": cfg.max_output_buffer_timeout_ms * ms,
            "deflate": cfg.deflate,
            "max_deflate_level": cfg.max_deflate_level,
            "snappy": cfg.snappy,
            "max_channel_consumers": cfg.max_channel_consumers,
            "auth_http_addresses": cfg.auth_http_addresses,
            "tls_required": int(cfg.tls_required),
            "e2e_processing_latency_percentiles": cfg.e2e_processing_latency_percentiles,
            "e2e_processing_latency_window_time": int(cfg.e2e_processing_latency_window_s * 1e9),
        }

    def info(self) -> dict[str, object]:
        cfg = self.config
        return {
            "version": VERSION,
            "broadcast_address": cfg.broadcast_host,
            "hostname": socket.gethostname(),
            "http_port": cfg.http_port if cfg.http_port is not None else -1,
            "tcp_port": cfg.tcp_port,
            "start_time": int(self.started_at),
            "max_heartbeat_interval": cfg.max_heartbeat_interval_ms * 1_000_000,
            "max_output_buffer_size": cfg.max_output_buffer_size,
            "max_output_buffer_timeout": cfg.max_output_buffer_timeout_ms * 1_000_000,
            "max_deflate_level": cfg.max_deflate_level,
        }


def _within_log(channel: str, cursor: int, pending: dict[int, int], end: int) -> tuple[int, dict[int, int]]:
    """A saved cursor past the log's end: with async flush, power loss can take the log's unflushed tail
    after the cursor over it was saved. The log goes on from its recovered end, so the cursor must too,
    or the channel would skip every message written there until the log grew past the old cursor."""
    if cursor <= end:
        return cursor, pending
    log.warning(
        "nsqd: channel %s was saved at offset %d but the log ends at %d (its tail was lost, as async flush "
        "allows on power loss): it goes on from %d",
        channel,
        cursor,
        end,
        end,
    )
    return end, {offset: attempts for offset, attempts in pending.items() if offset < end}


def _ssl_context(config: NsqdConfig) -> ssl.SSLContext | None:
    """nsqd's TLS settings; None when no certificate is configured (clients are then refused TLS)."""
    if not (config.tls_cert and config.tls_key):
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(config.tls_cert, config.tls_key)
    if config.tls_root_ca_file:
        context.load_verify_locations(config.tls_root_ca_file)
    if config.tls_client_auth_policy:
        if not config.tls_root_ca_file:
            raise ValueError(
                "a TLS client auth policy needs a root CA file to check client certificates with"
            )
        context.verify_mode = ssl.CERT_REQUIRED
    return context
