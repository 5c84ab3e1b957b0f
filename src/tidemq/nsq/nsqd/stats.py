"""``/stats`` in nsqd's shapes (docs/protocols/nsq-http.md#stats): JSON field names and order as nsqd emits
them, and the text form.

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
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from tidemq.nsq.nsqd.quantile import human_ns, latency_result
from tidemq.nsq.protocol import VERSION

if TYPE_CHECKING:
    from tidemq.nsq.nsqd.channel import Channel
    from tidemq.nsq.nsqd.connection import NsqConnection
    from tidemq.nsq.nsqd.server import Nsqd
    from tidemq.nsq.nsqd.topic import Topic

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
    if conn.auth_session.state is not None:
        stats["authed"] = True
        if conn.auth_session.state.identity:
            stats["auth_identity"] = conn.auth_session.state.identity
        if conn.auth_session.state.identity_url:
            stats["auth_identity_url"] = conn.auth_session.state.identity_url
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
        topics = [  # a channel filter leaves out the topics without that channel, as nsqd does
            topic_stats(t, query)
            for name, t in sorted(nsqd.topics.items())
            if (query.topic is None or name == query.topic)
            and (query.channel is None or query.channel in t.channels)
        ]
    stats: dict[str, Any] = {
        "version": VERSION,
        "health": f"NOK - {nsqd.health_problem}" if nsqd.health_problem else "OK",
        "start_time": int(nsqd.started_at),
        "topics": topics,
    }
    if query.include_mem:
        stats["memory"] = memory_stats()
    # Every client that has published is a producer, whatever the topic asked for (only its pub_counts are
    # narrowed to that topic); asking for a topic nsqd does not have lists none, as nsqd answers.
    producers = [
        client_stats(c, query.topic)
        for c in sorted(nsqd.connections, key=lambda c: c.remote)
        if c.pub_counts and topics is not None
    ]
    stats["producers"] = producers if producers and query.include_clients else None
    return stats


def go_duration(seconds: float) -> str:
    """A duration as Go's ``time.Duration.String`` prints it (``1.319926049s``, ``180.297491ms``)."""
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    if ns < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= size:
                whole, frac = divmod(ns, size)
                digits = len(str(size)) - 1
                text = f"{whole}.{frac:0{digits}d}".rstrip("0").rstrip(".") if digits else str(whole)
                return text + unit
    whole, frac = divmod(ns, 1_000_000_000)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    sec_text = f"{secs}.{frac:09d}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{sec_text}"
    return f"{minutes}m{sec_text}" if minutes else sec_text


def _client_line(client: dict[str, Any], now: float) -> str:
    """nsqd's ``ClientV2Stats.String``: ``[V2 host:port user-agent]``, then producer or consumer figures."""
    port = client["remote_address"].rsplit(":", 1)[-1]
    who = f"{client['hostname']}:{port} {client['user_agent']}"
    connected = go_duration(int(now - client["connect_ts"]))  # Go truncates it to the second
    counts = client.get("pub_counts") or []
    if counts:
        total = sum(pc["count"] for pc in counts)
        topics = ",".join(f"{pc['topic']}={pc['count']}" for pc in counts)
        return f"[{client['version']} {who:<21}] msgs: {total:<8} topics: {topics} connected: {connected}"
    return (
        f"[{client['version']} {who:<21}] state: {client['state']} inflt: {client['in_flight_count']:<4} "
        f"rdy: {client['ready_count']:<4} fin: {client['finish_count']:<8} "
        f"re-q: {client['requeue_count']:<8} "
        f"msgs: {client['message_count']:<8} connected: {connected}"
    )


def _latency_text(latency: dict[str, Any]) -> str:
    """nsqd's ``e2e%:`` column: each tracked quantile's value, in the order asked for."""
    return ", ".join(human_ns(p["value"]) for p in latency["percentiles"] or ())


def render_text(stats: dict[str, Any]) -> str:
    """The plain-text /stats page, laid out line for line like nsqd's (``nsqd/http.go`` printStats)."""
    now = time.time()
    started = datetime.fromtimestamp(stats["start_time"]).astimezone()
    lines = [
        f"nsqd v{stats['version']} (tidemq)",
        f"start_time {started.isoformat(timespec='seconds').replace('+00:00', 'Z')}",
        f"uptime {go_duration(now - stats['start_time'])}",
        "",
        f"Health: {stats['health']}",
    ]
    memory = stats.get("memory")
    if memory is not None:
        lines += ["", "Memory:"] + [f"   {name:<25}\t{value}" for name, value in memory.items()]
    lines += ["", "Topics: None" if not stats["topics"] else "Topics:"]
    for i, t in enumerate(stats["topics"] or ()):
        paused = "*P " if t["paused"] else "   "
        lines += [""] * (i > 0)  # nsqd puts a blank line between topics, none after "Topics:"
        lines += [
            f"{paused}[{t['topic_name']:<15}] depth: {t['depth']:<5} be-depth: {t['backend_depth']:<5} "
            f"msgs: {t['message_count']:<8} e2e%: {_latency_text(t['e2e_processing_latency'])}",
        ]
        for c in t["channels"]:
            paused = "   *P " if c["paused"] else "      "
            lines.append(
                f"{paused}[{c['channel_name']:<25}] depth: {c['depth']:<5} "
                f"be-depth: {c['backend_depth']:<5} inflt: {c['in_flight_count']:<4} "
                f"def: {c['deferred_count']:<4} re-q: {c['requeue_count']:<5} "
                f"timeout: {c['timeout_count']:<5} msgs: {c['message_count']:<8} "
                f"e2e%: {_latency_text(c['e2e_processing_latency'])}"
            )
            lines += [f"        {_client_line(cl, now)}" for cl in c["clients"] or ()]
    producers = stats.get("producers")
    lines += ["", "Producers:" if producers else "Producers: None"]
    lines += [f"   {_client_line(p, now)}" for p in producers or ()]
    return "\n".join(lines) + "\n"
