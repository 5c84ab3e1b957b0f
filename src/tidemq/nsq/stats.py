"""``/stats`` in nsqd's shapes (spec 3.3): JSON field names and order as nsqd emits them, and the text form.

nsqadmin and monitoring scripts read these fields by name, so the JSON mirrors nsqd even where tidemq
has nothing to report (Go heap figures): those get neutral values. End-to-end processing latency
quantiles are reported per channel and per topic when nsqd is told which to track
(``--e2e-processing-latency-percentile``); otherwise their object is empty, as nsqd's is.
"""

from __future__ import annotations

import gc
import resource
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from tidemq.nsq.config import VERSION
from tidemq.nsq.quantile import human_ns, latency_result

if TYPE_CHECKING:
    from tidemq.nsq.channel import Channel, Topic
    from tidemq.nsq.connection import NsqConnection
    from tidemq.nsq.nsqd import Nsqd

NO_LATENCY = {"count": 0, "percentiles": None}


@dataclass(slots=True)
class StatsQuery:
    topic: str | None = None
    channel: str | None = None
    include_clients: bool = True
    include_mem: bool = True


def client_stats(conn: NsqConnection, topic: str | None = None) -> dict[str, Any]:
    stats: dict[str, Any] = {
        "client_id": conn.client_id,
        "hostname": conn.hostname,
        "version": "V2",
        "remote_address": conn.remote,
        "state": int(conn.state),
        "ready_count": conn.rdy,
        "in_flight_count": conn.in_flight,
        "message_count": conn.stats["message_count"],
        "finish_count": conn.stats["finish_count"],
        "requeue_count": conn.stats["requeue_count"],
        "connect_ts": conn.connected_at,
        "sample_rate": conn.sample_rate,
        "deflate": conn.compression is not None and conn.compression.name == "deflate",
        "snappy": conn.compression is not None and conn.compression.name == "snappy",
        "user_agent": conn.user_agent,
    }
    if conn.auth_state is not None:
        stats["authed"] = True
        if conn.auth_state.identity:
            stats["auth_identity"] = conn.auth_state.identity
        if conn.auth_state.identity_url:
            stats["auth_identity_url"] = conn.auth_state.identity_url
    stats["topology_zone"] = ""
    stats["topology_region"] = ""
    pub_counts = [
        {"topic": name, "count": count}
        for name, count in sorted(conn.pub_counts.items())
        if topic is None or name == topic
    ]
    if pub_counts:
        stats["pub_counts"] = pub_counts
    tls_object = conn.transport.get_extra_info("ssl_object") if conn.tls and conn.transport else None
    cipher = tls_object.cipher() if tls_object is not None else None
    stats.update(
        tls=conn.tls,
        tls_cipher_suite=cipher[0] if cipher else "",
        tls_version=tls_object.version() if tls_object is not None else "",
        tls_negotiated_protocol=(tls_object.selected_alpn_protocol() or "") if tls_object is not None else "",
        tls_negotiated_protocol_is_mutual=False,
    )
    return stats


def channel_stats(channel: Channel, include_clients: bool) -> dict[str, Any]:
    depth = channel.depth
    clients: Any = None
    if include_clients:
        clients = [client_stats(cast("NsqConnection", c)) for c in channel.clients]
    return {
        "channel_name": channel.name,
        "depth": depth,
        "backend_depth": 0 if channel.ephemeral else depth,
        "in_flight_count": len(channel.in_flight),
        "deferred_count": len(channel.deferred),
        "message_count": channel.stats.message_count,
        "requeue_count": channel.stats.requeue_count,
        "timeout_count": channel.stats.timeout_count,
        "client_count": len(channel.clients),
        "clients": clients,
        "paused": channel.paused or channel.topic.paused,
        "e2e_processing_latency": _latency([channel]) if channel.latency is not None else NO_LATENCY,
    }


def _latency(channels: list[Channel]) -> dict[str, Any]:
    """The merged e2e processing latency of ``channels`` (a topic's: all of them, as nsqd merges them)."""
    sources = [ch.latency for ch in channels if ch.latency is not None]
    if not sources:
        return NO_LATENCY
    return latency_result(sources[0].settings, sources)


def topic_stats(topic: Topic, query: StatsQuery) -> dict[str, Any]:
    channels = [
        channel_stats(ch, query.include_clients)
        for name, ch in sorted(topic.channels.items())
        if query.channel is None or name == query.channel
    ]
    depth = topic.depth
    return {
        "topic_name": topic.name,
        "channels": channels,
        "depth": depth,
        "backend_depth": 0 if topic.ephemeral else depth,
        "message_count": topic.message_count,
        "message_bytes": topic.message_bytes,
        "paused": topic.paused,
        "e2e_processing_latency": _latency(list(topic.channels.values())),
    }


def memory_stats() -> dict[str, int]:
    """Best-effort stand-ins for Go's heap figures: what Python can tell about its own memory."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "heap_objects": len(gc.get_objects()),
        "heap_idle_bytes": 0,
        "heap_in_use_bytes": rss,
        "heap_released_bytes": 0,
        "gc_pause_usec_100": 0,
        "gc_pause_usec_99": 0,
        "gc_pause_usec_95": 0,
        "next_gc_bytes": 0,
        "gc_total_runs": sum(s["collections"] for s in gc.get_stats()),
    }


def nsqd_stats(nsqd: Nsqd, query: StatsQuery) -> dict[str, Any]:
    topics: list[dict[str, Any]] | None
    if query.topic is not None and query.topic not in nsqd.topics:
        topics = None
    else:
        topics = [
            topic_stats(t, query)
            for name, t in sorted(nsqd.topics.items())
            if query.topic is None or name == query.topic
        ]
    stats: dict[str, Any] = {
        "version": VERSION,
        "health": f"NOK - {nsqd.health_problem}" if nsqd.health_problem else "OK",
        "start_time": int(nsqd.started_at),
        "topics": topics,
    }
    if query.include_mem:
        stats["memory"] = memory_stats()
    producers = [
        client_stats(c, query.topic)
        for c in sorted(nsqd.connections, key=lambda c: c.remote)
        if c.pub_counts and (query.topic is None or query.topic in c.pub_counts)
    ]
    stats["producers"] = producers if producers and query.include_clients else None
    return stats


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes}m{secs}s" if hours else f"{minutes}m{secs}s" if minutes else f"{secs}s"


def _latency_text(latency: dict[str, Any]) -> str:
    """nsqd's ``e2e%:`` column: each tracked quantile's value, in the order asked for."""
    return ", ".join(human_ns(p["value"]) for p in latency["percentiles"] or ())


def render_text(stats: dict[str, Any]) -> str:
    """The plain-text /stats page, laid out like nsqd's for people reading it in a terminal."""
    now = time.time()
    lines = [
        f"nsqd v{stats['version']} (tidemq)",
        f"start_time {time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(stats['start_time']))}",
        f"uptime {_duration(now - stats['start_time'])}",
        "",
        f"Health: {stats['health']}",
        "",
    ]
    if not stats["topics"]:
        lines.append("NO_TOPICS")
    else:
        lines.append("Topics:")
        for t in stats["topics"]:
            lines.append(
                f"   [{t['topic_name']:<25}] depth: {t['depth']:<5} be-depth: {t['backend_depth']:<5} "
                f"msgs: {t['message_count']:<8} e2e%: {_latency_text(t['e2e_processing_latency'])}"
            )
            for c in t["channels"]:
                lines.append(
                    f"      [{c['channel_name']:<25}] depth: {c['depth']:<5} "
                    f"be-depth: {c['backend_depth']:<5} inflt: {c['in_flight_count']:<4} "
                    f"def: {c['deferred_count']:<4} re-q: {c['requeue_count']:<5} "
                    f"timeout: {c['timeout_count']:<5} msgs: {c['message_count']:<8} "
                    f"e2e%: {_latency_text(c['e2e_processing_latency'])}"
                )
                for cl in c["clients"] or []:
                    lines.append(
                        f"        [V2 {cl['client_id']:<21}] state: {cl['state']} "
                        f"inflt: {cl['in_flight_count']:<4} rdy: {cl['ready_count']:<4} "
                        f"fin: {cl['finish_count']:<8} re-q: {cl['requeue_count']:<8} "
                        f"msgs: {cl['message_count']:<8} connected: {_duration(now - cl['connect_ts'])}"
                    )
    if stats.get("producers"):
        lines += ["", "Producers:"]
        for p in stats["producers"]:
            counts = ", ".join(f"{pc['topic']}: {pc['count']}" for pc in p.get("pub_counts", []))
            lines.append(f"   [V2 {p['client_id']:<21}] msgs: {p['message_count']:<8} pub_counts: {counts}")
    return "\n".join(lines) + "\n"
