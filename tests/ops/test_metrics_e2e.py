"""``/metrics`` on the HTTP operations port of a real ``tidemq server``: every family is there after both
protocols carried messages, and the numbers are the ones the CLI and nsqd's ``/stats`` report."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.consumer_support import Collector, consumer, produce
from tests.support import ServerProcess, create_topic, eventually, tidemq_cli, unique

pytestmark = pytest.mark.e2e

FAMILIES = {
    # name as the parser reports it (a counter's without _total): type
    "rocketmq_messages_in": "counter",
    "rocketmq_throughput_in": "counter",
    "rocketmq_producer_offset": "gauge",
    "rocketmq_topic_min_offset": "gauge",
    "rocketmq_consumer_offset": "gauge",
    "rocketmq_consumer_lag_messages": "gauge",
    "rocketmq_group_diff": "gauge",
    "rocketmq_group_retrydiff": "gauge",
    "rocketmq_group_dlqdiff": "gauge",
    "rocketmq_consumer_tps": "gauge",
    "rocketmq_producer_connections": "gauge",
    "rocketmq_consumer_connections": "gauge",
    "rocketmq_send_latency_seconds": "histogram",
    "rocketmq_pull_latency_seconds": "histogram",
    "rocketmq_commitlog_size_bytes": "gauge",
    "rocketmq_commitlog_max_offset_bytes": "gauge",
    "rocketmq_commitlog_flushed_bytes": "counter",
    "rocketmq_disk_used_ratio": "gauge",
    "rocketmq_disk_full": "gauge",
    "rocketmq_flush_latency_seconds": "histogram",
    "rocketmq_store_recovery_seconds": "gauge",
    "nsq_topic_depth": "gauge",
    "nsq_topic_message_count": "gauge",
    "nsq_topic_message_bytes": "gauge",
    "nsq_topic_paused": "gauge",
    "nsq_topic_channel_count": "gauge",
    "nsq_channel_depth": "gauge",
    "nsq_channel_in_flight_count": "gauge",
    "nsq_channel_deferred_count": "gauge",
    "nsq_channel_message_count": "gauge",
    "nsq_channel_requeue_count": "gauge",
    "nsq_channel_timeout_count": "gauge",
    "nsq_channel_client_count": "gauge",
    "nsq_channel_paused": "gauge",
    "tidemq_open_connections": "gauge",
    "process_resident_memory_bytes": "gauge",
    "process_open_fds": "gauge",
}

Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape(server: ServerProcess) -> tuple[dict[str, str], Samples]:
    """(family name -> type, sample name -> [(labels, value)]) of one scrape."""
    with urllib.request.urlopen(f"http://{server.http}/metrics", timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    types: dict[str, str] = {}
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return types, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    found = [v for got, v in samples.get(name, []) if all(got.get(k) == x for k, x in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def http(method: str, url: str) -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, data=b"" if method == "POST" else None)) as r:
        return bytes(r.read())


@pytest.fixture(scope="module")
def loaded(server: ServerProcess) -> Iterator[tuple[ServerProcess, str, str, str]]:
    """Both protocols carried messages: a RocketMQ topic a group consumed then fell 5 behind on, and an
    NSQ topic whose channel holds 3 messages."""
    topic, group, nsq_topic = unique("MT"), unique("MG"), unique("nt")

    async def rocketmq() -> None:
        await create_topic(server.broker, topic, 4)
        await produce(server.namesrv, topic, 12)
        seen = Collector()
        push = consumer(server.namesrv, group, topic, seen)
        await push.start()
        try:
            await eventually(lambda: len(seen.distinct()) == 12, what="12 consumed")

            def caught_up() -> bool:
                _, samples = scrape(server)
                diff = [v for labels, v in samples.get("rocketmq_group_diff", []) if labels["topic"] == topic]
                return diff == [0.0]

            await eventually(caught_up, what="the group's offsets committed")
        finally:
            await push.shutdown()
        await produce(server.namesrv, topic, 5, start=100)

    asyncio.run(rocketmq())
    base = f"http://{server.nsqd_http}"
    http("POST", f"{base}/topic/create?topic={nsq_topic}")
    http("POST", f"{base}/channel/create?topic={nsq_topic}&channel=ch")
    for i in range(3):
        urllib.request.urlopen(urllib.request.Request(f"{base}/pub?topic={nsq_topic}", data=f"n{i}".encode()))
    yield server, topic, group, nsq_topic


def eventually_value(server: ServerProcess, name: str, at_least: float, **labels: str) -> bool:
    """Whether ``name{labels}`` reaches ``at_least`` within a few scrapes (a new connection is counted once
    the server has accepted it)."""
    for _ in range(50):
        if value(scrape(server)[1], name, **labels) >= at_least:
            return True
        time.sleep(0.1)
    return False


def test_every_family_is_served_with_its_type(loaded: tuple[ServerProcess, str, str, str]) -> None:
    server, topic, group, _ = loaded
    types, samples = scrape(server)
    missing = {name: kind for name, kind in FAMILIES.items() if types.get(name) != kind}
    assert missing == {}, {name: types.get(name) for name in missing}
    assert value(samples, "rocketmq_send_latency_seconds_count") >= 17
    assert value(samples, "rocketmq_pull_latency_seconds_count") >= 1
    assert value(samples, "rocketmq_commitlog_size_bytes") > 0
    assert 0 < value(samples, "rocketmq_disk_used_ratio") < 1
    assert value(samples, "process_resident_memory_bytes") > 1_000_000
    assert value(samples, "tidemq_open_connections", port="namesrv") >= 1  # the broker's registration
    held = socket.create_connection(("127.0.0.1", server.broker_port))
    try:
        assert eventually_value(server, "tidemq_open_connections", 1, port="broker")
    finally:
        held.close()
    assert value(samples, "rocketmq_consumer_tps", consumer_group=group, topic=topic) > 0
    written = sum(v for labels, v in samples["rocketmq_throughput_in_total"] if labels["topic"] == topic)
    assert written > 17 * 40  # stored records: body plus the record's header and properties


def test_topic_offsets_match_the_cli(loaded: tuple[ServerProcess, str, str, str]) -> None:
    server, topic, _, _ = loaded
    _, samples = scrape(server)
    cli = tidemq_cli("topic", "stats", topic, "--namesrv", server.namesrv)
    assert cli.returncode == 0, cli.stderr
    rows = [line.split() for line in cli.stdout.splitlines()[1:] if line.strip()]
    assert len(rows) == 4
    for row in rows:
        queue, low, high = row[1], float(row[2]), float(row[3])
        assert value(samples, "rocketmq_producer_offset", topic=topic, queue_id=queue) == high
        assert value(samples, "rocketmq_messages_in_total", topic=topic, queue_id=queue) == high
        assert value(samples, "rocketmq_topic_min_offset", topic=topic, queue_id=queue) == low
    assert sum(float(r[3]) for r in rows) == 17


def test_group_lag_matches_the_cli(loaded: tuple[ServerProcess, str, str, str]) -> None:
    server, topic, group, _ = loaded
    _, samples = scrape(server)
    cli = tidemq_cli("group", "progress", group, "--namesrv", server.namesrv, "--format", "json")
    assert cli.returncode == 0, cli.stderr
    rows = [json.loads(line) for line in cli.stdout.splitlines()]
    assert sum(r["lag"] for r in rows) == 5
    for r in rows:
        labels = {"consumer_group": group, "topic": r["topic"], "queue_id": str(r["queue"])}
        assert value(samples, "rocketmq_consumer_lag_messages", **labels) == r["lag"]
        assert value(samples, "rocketmq_consumer_offset", **labels) == r["consumer_offset"]
    assert value(samples, "rocketmq_group_diff", consumer_group=group, topic=topic) == 5
    assert value(samples, "rocketmq_group_retrydiff", consumer_group=group) == 0
    assert value(samples, "rocketmq_group_dlqdiff", consumer_group=group) == 0


def test_nsq_gauges_match_nsqd_stats(loaded: tuple[ServerProcess, str, str, str]) -> None:
    server, _, _, nsq_topic = loaded
    _, samples = scrape(server)
    stats = json.loads(http("GET", f"http://{server.nsqd_http}/stats?format=json&topic={nsq_topic}"))
    (topic,) = stats["topics"]
    (channel,) = topic["channels"]
    assert channel["depth"] == 3
    for field in ("depth", "message_count", "message_bytes"):
        assert value(samples, f"nsq_topic_{field}", topic=nsq_topic) == topic[field]
    for field in ("depth", "in_flight_count", "deferred_count", "message_count", "requeue_count"):
        assert value(samples, f"nsq_channel_{field}", topic=nsq_topic, channel="ch") == channel[field]
    assert (
        value(samples, "nsq_channel_timeout_count", topic=nsq_topic, channel="ch") == channel["timeout_count"]
    )
    assert (
        value(samples, "nsq_channel_client_count", topic=nsq_topic, channel="ch") == channel["client_count"]
    )


def test_a_bad_path_is_404(server: ServerProcess) -> None:
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://{server.http}/nope", timeout=10)
    assert err.value.code == 404


def test_no_http_leaves_the_port_closed_and_port_0_is_printed(tmp_path: Path) -> None:
    off = ServerProcess(tmp_path / "off", "--no-http").start()
    try:
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", off.ops_port), timeout=2):
            pass
    finally:
        off.stop()
    zero = ServerProcess(tmp_path / "zero", "--no-http")
    args = [a for a in zero.args() if a != "--no-http"] + ["--http-port", "0"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert ready.startswith("tidemq ready"), ready
        (part,) = [p.strip() for p in ready.split(",") if p.strip().startswith("http ")]
        port = int(part.rpartition(":")[2])
        assert port not in (0, 8080)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            assert b"rocketmq_commitlog_size_bytes" in resp.read()
    finally:
        proc.terminate()
        proc.wait(20)
