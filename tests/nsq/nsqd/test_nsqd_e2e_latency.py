"""``--e2e-processing-latency-percentile``: /stats reports publish-to-FIN latency quantiles per channel and
per topic (its channels merged), in nsqd's JSON and text layout."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.nsq.nsqd.test_nsqd_http import ok
from tests.nsq_support import RawNsq
from tests.support import ServerProcess, eventually

pytestmark = pytest.mark.e2e


def _latency(srv: ServerProcess, channel: str | None = None) -> dict[str, Any]:
    data = orjson.loads(ok(srv, "GET", "/stats?format=json&topic=timed"))
    topic = data["topics"][0]
    if channel is None:
        return topic["e2e_processing_latency"]  # type: ignore[no-any-return]
    found = next(c for c in topic["channels"] if c["channel_name"] == channel)
    return found["e2e_processing_latency"]  # type: ignore[no-any-return]


async def test_stats_report_the_configured_latency_quantiles(tmp_path: Path) -> None:
    """150 messages FINed after at least 0.2 s, 50 after at least 0.8 s: the median lies among the first,
    the 99th percentile and the maximum among the last; the topic merges its two channels' latencies."""
    srv = ServerProcess(
        tmp_path / "data",
        "--e2e-processing-latency-percentile",
        "0.5,0.99",
        "--e2e-processing-latency-percentile",
        "1.0",
        command="nsqd",
    ).start()

    try:
        pub = await RawNsq.open(srv.nsqd)
        assert await pub.pub("quiet", b"no channel") == b"OK"
        sub, other = await RawNsq.open(srv.nsqd), await RawNsq.open(srv.nsqd)
        await sub.sub("timed", "ch", rdy=200)
        await other.sub("timed", "other", rdy=200)
        assert await pub.mpub("timed", [b"m%d" % i for i in range(200)]) == b"OK"
        messages = [await sub.message() for _ in range(200)]
        for m in [await other.message() for _ in range(200)][:100]:
            other.send("FIN", m.id)
        await asyncio.sleep(0.2)
        for m in messages[:150]:
            sub.send("FIN", m.id)
        await eventually(lambda: _latency(srv, "ch")["count"] == 150, in_thread=True)
        early_upper = time.time_ns() - min(m.timestamp for m in messages)
        await asyncio.sleep(0.8)
        late_lower = time.time_ns() - max(m.timestamp for m in messages)
        for m in messages[150:]:
            sub.send("FIN", m.id)
        await eventually(lambda: _latency(srv, "ch")["count"] == 200, in_thread=True)
        for conn in (pub, sub, other):
            conn.close()
        channel = _latency(srv, "ch")
        assert [p["quantile"] for p in channel["percentiles"]] == [0.5, 0.99, 1.0]
        median, p99, maximum = (p["value"] for p in channel["percentiles"])
        assert 0.2e9 <= median <= early_upper < late_lower <= p99 <= maximum
        topic = _latency(srv)
        assert topic["count"] == 300 and [p["quantile"] for p in topic["percentiles"]] == [0.5, 0.99, 1.0]
        assert topic["percentiles"][2]["value"] == maximum
        stats = orjson.loads(ok(srv, "GET", "/stats?format=json&topic=quiet"))["topics"][0]
        assert stats["e2e_processing_latency"] == {"count": 0, "percentiles": None}  # no channel: nsqd's
        text = ok(srv, "GET", "/stats").decode()
        line = next(line for line in text.splitlines() if "[ch " in line)
        assert re.search(r"e2e%: \d+\.\dms, \d+\.\d(ms|s), \d+\.\d(ms|s)$", line), line
        assert orjson.loads(ok(srv, "GET", "/config/e2e_processing_latency_percentiles")) == [0.5, 0.99, 1.0]
        assert orjson.loads(ok(srv, "GET", "/config/e2e_processing_latency_window_time")) == 600 * 10**9
    finally:
        assert srv.stop() == 0
