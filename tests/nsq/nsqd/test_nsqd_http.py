"""nsqd's HTTP API and its registration with lookupd, against a real ``tidemq server`` process."""

from __future__ import annotations

import asyncio
import struct
import urllib.error
import urllib.request
from typing import Any

import orjson
import pytest

from tests.nsq_support import RawNsq
from tests.support import ServerProcess, wait_for

pytestmark = pytest.mark.e2e

V1 = "nsq; version=1.0"


def http(
    server: ServerProcess, method: str, path: str, body: bytes | None = None, *, lookupd: bool = False
) -> tuple[int, dict[str, str], bytes]:
    base = server.lookupd_http if lookupd else server.nsqd_http
    req = urllib.request.Request(f"http://{base}{path}", data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def ok(server: ServerProcess, method: str, path: str, body: bytes | None = None) -> bytes:
    status, headers, data = http(server, method, path, body)
    assert status == 200, (path, status, data)
    assert headers.get("X-NSQ-Content-Type") == V1
    return data


def error(server: ServerProcess, method: str, path: str, body: bytes | None = None) -> tuple[int, str]:
    status, headers, data = http(server, method, path, body)
    assert headers.get("X-NSQ-Content-Type") == V1, headers
    assert headers.get("Content-Type", "").startswith("application/json")
    return status, orjson.loads(data)["message"]


def stats(server: ServerProcess, query: str = "") -> dict[str, Any]:
    return orjson.loads(ok(server, "GET", f"/stats?format=json{query}"))  # type: ignore[no-any-return]


def channel_stats(server: ServerProcess, topic: str, channel: str) -> dict[str, Any]:
    topics = stats(server, f"&topic={topic}")["topics"]
    return next(c for c in topics[0]["channels"] if c["channel_name"] == channel)  # type: ignore[no-any-return]


def test_ping_info_and_routing_errors(server: ServerProcess) -> None:
    status, headers, body = http(server, "GET", "/ping")
    assert (status, body) == (200, b"OK") and "X-NSQ-Content-Type" not in headers
    info = orjson.loads(ok(server, "GET", "/info"))
    assert info["version"] == "1.3.0" and info["tcp_port"] == server.nsqd_port
    assert info["http_port"] == server.nsqd_http_port and info["broadcast_address"] == "127.0.0.1"
    assert info["max_heartbeat_interval"] == 60_000_000_000
    assert error(server, "GET", "/no/such/path") == (404, "NOT_FOUND")
    assert error(server, "GET", "/pub?topic=x") == (405, "METHOD_NOT_ALLOWED")


async def test_pub_and_mpub_deliver_over_tcp(server: ServerProcess) -> None:
    assert ok(server, "POST", "/pub?topic=h_pub", b"one") == b"OK"
    assert ok(server, "POST", "/mpub?topic=h_pub", b"two\n\nthree\nfour\r\n") == b"OK"
    binary = struct.pack(">i", 2) + struct.pack(">i", 4) + b"five" + struct.pack(">i", 3) + b"six"
    assert ok(server, "POST", "/mpub?topic=h_pub&binary=true", binary) == b"OK"
    assert ok(server, "POST", "/mpub?topic=h_pub", b"") == b"OK"  # nothing to publish is fine
    sub = await RawNsq.open(server.nsqd)
    await sub.sub("h_pub", "c", rdy=50)
    got = await sub.drain(0.7)
    sub.close()
    assert got == [b"one", b"two", b"three", b"four\r", b"five", b"six"]


def test_pub_errors(server: ServerProcess) -> None:
    assert error(server, "POST", "/pub?topic=t", b"") == (400, "MSG_EMPTY")
    assert error(server, "POST", "/pub", b"x") == (400, "MISSING_ARG_TOPIC")
    assert error(server, "POST", "/pub?topic=bad!name", b"x") == (400, "INVALID_TOPIC")
    assert error(server, "POST", "/pub?topic=t&defer=soon", b"x") == (400, "INVALID_DEFER")
    assert error(server, "POST", "/pub?topic=t&defer=-1", b"x") == (400, "INVALID_DEFER")
    assert error(server, "POST", "/pub?topic=t&defer=3600001", b"x") == (400, "INVALID_DEFER")
    assert error(server, "POST", "/pub?topic=t", b"x" * (1024 * 1024 + 1)) == (413, "MSG_TOO_BIG")
    assert error(server, "POST", "/mpub?topic=t&binary=1", struct.pack(">i", 0)) == (413, "BAD_BODY")
    truncated = struct.pack(">i", 1) + struct.pack(">i", 10) + b"abc"
    assert error(server, "POST", "/mpub?topic=t&binary=1", truncated)[0] == 413
    assert error(server, "POST", "/mpub?topic=t", b"x" * (1024 * 1024 + 1)) == (413, "MSG_TOO_BIG")
    assert error(server, "POST", "/mpub?topic=t", b"x" * (5 * 1024 * 1024 + 1)) == (413, "BODY_TOO_BIG")
    status, _, body = http(server, "GET", "/ping")
    assert (status, body) == (200, b"OK"), "bad requests leave the server healthy"


async def test_pub_with_defer_holds_the_message(server: ServerProcess) -> None:
    sub = await RawNsq.open(server.nsqd)
    await sub.sub("h_defer", "c", rdy=5)
    await asyncio.to_thread(ok, server, "POST", "/pub?topic=h_defer&defer=800", b"later")
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with_deferred = await asyncio.to_thread(channel_stats, server, "h_defer", "c")
    assert with_deferred["deferred_count"] == 1
    msg = await sub.message(timeout=5)
    assert msg.body == b"later" and loop.time() - t0 >= 0.5
    sub.close()


def test_topic_and_channel_administration(server: ServerProcess) -> None:
    assert ok(server, "POST", "/topic/create?topic=h_admin") == b""
    assert error(server, "POST", "/topic/create") == (400, "MISSING_ARG_TOPIC")
    assert error(server, "POST", "/topic/create?topic=no%20spaces") == (400, "INVALID_TOPIC")
    assert error(server, "POST", "/channel/create?topic=h_admin") == (400, "MISSING_ARG_CHANNEL")
    assert error(server, "POST", "/channel/create?topic=h_admin&channel=b@d") == (400, "INVALID_ARG_CHANNEL")
    assert error(server, "POST", "/channel/create?topic=b@d&channel=c") == (400, "INVALID_ARG_TOPIC")
    assert error(server, "POST", "/channel/create?topic=h_nothere&channel=c") == (404, "TOPIC_NOT_FOUND")
    assert ok(server, "POST", "/channel/create?topic=h_admin&channel=keep") == b""
    assert ok(server, "POST", "/channel/create?topic=h_admin&channel=drop") == b""
    ok(server, "POST", "/mpub?topic=h_admin", b"a\nb\nc")
    assert channel_stats(server, "h_admin", "drop")["depth"] == 3
    assert ok(server, "POST", "/channel/empty?topic=h_admin&channel=drop") == b""
    assert channel_stats(server, "h_admin", "drop")["depth"] == 0
    assert channel_stats(server, "h_admin", "keep")["depth"] == 3, "emptying one channel leaves the others"
    assert ok(server, "POST", "/channel/delete?topic=h_admin&channel=drop") == b""
    assert error(server, "POST", "/channel/delete?topic=h_admin&channel=drop") == (404, "CHANNEL_NOT_FOUND")
    assert error(server, "POST", "/channel/empty?topic=h_admin&channel=drop") == (404, "CHANNEL_NOT_FOUND")
    names = [c["channel_name"] for c in stats(server, "&topic=h_admin")["topics"][0]["channels"]]
    assert names == ["keep"]
    assert error(server, "POST", "/topic/pause") == (400, "MISSING_ARG_TOPIC")
    assert error(server, "POST", "/topic/pause?topic=h_nothere") == (404, "TOPIC_NOT_FOUND")
    assert error(server, "POST", "/channel/pause?topic=h_admin&channel=nope") == (404, "CHANNEL_NOT_FOUND")
    assert ok(server, "POST", "/topic/delete?topic=h_admin") == b""
    assert error(server, "POST", "/topic/delete?topic=h_admin") == (404, "TOPIC_NOT_FOUND")
    assert error(server, "POST", "/topic/empty?topic=h_admin") == (404, "TOPIC_NOT_FOUND")
    assert stats(server, "&topic=h_admin")["topics"] is None


async def test_topic_backlog_empty(server: ServerProcess) -> None:
    ok(server, "POST", "/mpub?topic=h_backlog", b"old1\nold2")
    assert stats(server, "&topic=h_backlog")["topics"][0]["depth"] == 2
    assert ok(server, "POST", "/topic/empty?topic=h_backlog") == b""
    assert stats(server, "&topic=h_backlog")["topics"][0]["depth"] == 0
    ok(server, "POST", "/pub?topic=h_backlog", b"new")
    sub = await RawNsq.open(server.nsqd)
    await sub.sub("h_backlog", "c", rdy=10)
    got = await sub.drain(0.7)
    sub.close()
    assert got == [b"new"]


async def test_pause_and_unpause_stop_and_resume_delivery(server: ServerProcess) -> None:
    sub = await RawNsq.open(server.nsqd)
    await sub.sub("h_pause", "c", rdy=10)
    for target in ("/topic/%s?topic=h_pause", "/channel/%s?topic=h_pause&channel=c"):
        await asyncio.to_thread(ok, server, "POST", target % "pause")
        await asyncio.to_thread(ok, server, "POST", "/pub?topic=h_pause", b"held")
        assert await sub.drain(0.7) == [], f"{target} paused still delivered"
        assert (await asyncio.to_thread(channel_stats, server, "h_pause", "c"))["paused"] is True
        await asyncio.to_thread(ok, server, "POST", target % "unpause")
        assert await sub.drain(2.0) == [b"held"]
    sub.close()


async def test_stats_show_clients_producers_and_filters(server: ServerProcess) -> None:
    pub = await RawNsq.open(server.nsqd)
    await pub.identify(client_id="the-producer", user_agent="test/1.0")
    await pub.pub("h_stats", b"x")
    sub = await RawNsq.open(server.nsqd)
    await sub.identify(client_id="the-consumer")
    await sub.sub("h_stats", "c", rdy=7)
    await sub.message()
    data = await asyncio.to_thread(stats, server, "&topic=h_stats")
    topic = data["topics"][0]
    channel = topic["channels"][0]
    assert topic["topic_name"] == "h_stats" and topic["message_count"] == 1
    assert channel["in_flight_count"] == 1 and channel["client_count"] == 1
    client = channel["clients"][0]
    assert client["client_id"] == "the-consumer" and client["ready_count"] == 7
    assert client["in_flight_count"] == 1 and client["state"] == 3 and client["version"] == "V2"
    producer = next(p for p in data["producers"] if p["client_id"] == "the-producer")
    assert producer["pub_counts"] == [{"topic": "h_stats", "count": 1}]
    assert producer["user_agent"] == "test/1.0"
    lean = await asyncio.to_thread(stats, server, "&topic=h_stats&include_clients=false&include_mem=0")
    assert lean["topics"][0]["channels"][0]["clients"] is None and "memory" not in lean
    assert lean["producers"] is None
    assert (await asyncio.to_thread(stats, server, "&topic=h_nothing"))["topics"] is None
    text = (await asyncio.to_thread(ok, server, "GET", "/stats")).decode()
    assert "h_stats" in text and "test/1.0" in text  # nsqd shows clients as host:port user-agent
    pub.close()
    sub.close()


def test_config_get_and_put(server: ServerProcess) -> None:
    assert orjson.loads(ok(server, "GET", "/config/nsqlookupd_tcp_addresses")) == [server.lookupd_tcp]
    assert orjson.loads(ok(server, "GET", "/config/max_msg_size")) == 1024 * 1024
    assert error(server, "GET", "/config/no_such_option") == (400, "INVALID_OPTION")
    assert error(server, "PUT", "/config/max_msg_size", b"1") == (400, "INVALID_OPTION")
    assert error(server, "PUT", "/config/log_level", b"") == (413, "INVALID_VALUE")
    assert error(server, "PUT", "/config/log_level", b"loud") == (400, "INVALID_VALUE")
    assert orjson.loads(ok(server, "PUT", "/config/log_level", b"debug")) == 1  # nsqd shows lg.DEBUG as 1
    bad = [b"not json", b'["no-port"]', b'"127.0.0.1:1"', b"[1]"]
    for body in bad:
        assert error(server, "PUT", "/config/nsqlookupd_tcp_addresses", body) == (400, "INVALID_VALUE")
    same = orjson.dumps([server.lookupd_tcp])
    assert orjson.loads(ok(server, "PUT", "/config/nsqlookupd_tcp_addresses", same)) == [server.lookupd_tcp]


def test_nsqd_registers_topics_and_channels_with_lookupd(server: ServerProcess) -> None:
    def lookup(topic: str) -> tuple[int, Any]:
        status, _headers, body = http(server, "GET", f"/lookup?topic={topic}", lookupd=True)
        return status, orjson.loads(body)

    ok(server, "POST", "/topic/create?topic=h_lookup")
    _status, found = wait_for(lambda: (r := lookup("h_lookup"))[0] == 200 and r)
    producer = found["producers"][0]
    assert producer["tcp_port"] == server.nsqd_port and producer["http_port"] == server.nsqd_http_port
    assert producer["broadcast_address"] == "127.0.0.1" and producer["version"] == "1.3.0"
    ok(server, "POST", "/channel/create?topic=h_lookup&channel=watch")
    wait_for(lambda: lookup("h_lookup")[1]["channels"] == ["watch"])
    ok(server, "POST", "/topic/delete?topic=h_lookup")  # lookupd keeps the keys, without this producer
    wait_for(lambda: lookup("h_lookup")[1].get("producers") == [])
