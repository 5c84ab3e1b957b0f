"""In-process rules of the operations port: the histograms' buckets, the timed wrapper, the text families
and the root application hook the web console uses."""

from __future__ import annotations

import asyncio

from aiohttp import ClientSession, web
from prometheus_client.parser import text_string_to_metric_families

from tidemq.exposition import TextFamily, label_prefix
from tidemq.histogram import LatencyHistogram, timed
from tidemq.ops import OpsConfig, OpsServer
from tidemq.ops.server import ConnectionsCollector


def test_histogram_buckets_are_cumulative_and_end_with_inf() -> None:
    h = LatencyHistogram((0.001, 0.01))
    for seconds in (0.0005, 0.001, 0.005, 2.0):
        h.observe(seconds)
    assert h.cumulative() == [("0.001", 2.0), ("0.01", 3.0), ("+Inf", 4.0)]
    assert h.count == 4 and abs(h.total - 2.0065) < 1e-9


async def test_timed_observes_plain_and_awaitable_answers() -> None:
    h = LatencyHistogram()

    async def later() -> int:
        await asyncio.sleep(0.02)
        return 2

    assert timed(h, lambda: 1)() == 1
    assert h.count == 1
    pending = timed(h, later)()
    assert h.count == 1  # counted when the answer resolves, not when the coroutine is made
    assert await pending == 2  # type: ignore[misc]
    assert h.count == 2 and h.total >= 0.02


def test_text_family_parses_as_the_text_format() -> None:
    family = TextFamily("x_in", "Doc with a \\ backslash.", "counter", "queue_id")
    family.add(label_prefix(topic='we"ird\ntopic'), "3", 7)
    (parsed,) = text_string_to_metric_families(family.rendered_text)
    assert parsed.name == "x_in" and parsed.type == "counter"
    (sample,) = parsed.samples
    assert sample.labels == {"topic": 'we"ird\ntopic', "queue_id": "3"} and sample.value == 7


async def test_root_app_is_served_beside_metrics_and_unknown_paths_are_404() -> None:
    console = web.Application()

    async def index(request: web.Request) -> web.Response:
        return web.Response(text="console")

    console.router.add_get("/", index)
    ops = OpsServer(
        OpsConfig("127.0.0.1", 0, root_app=console), [ConnectionsCollector({"broker": lambda: 3})]
    )
    await ops.start()
    try:
        assert ops.port != 0
        async with ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{ops.port}/") as resp:
                assert resp.status == 200 and await resp.text() == "console"
            async with session.get(f"http://127.0.0.1:{ops.port}/metrics") as resp:
                assert 'tidemq_open_connections{port="broker"} 3.0' in await resp.text()
            async with session.get(f"http://127.0.0.1:{ops.port}/nope") as resp:
                assert resp.status == 404
    finally:
        await ops.close()
