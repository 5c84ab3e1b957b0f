"""Consumer discovery through nsqlookupd: a real ``tidemq server`` (nsqd registered with its lookupd)."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from tests.nsq_support import publish
from tests.support import ServerProcess, eventually, free_port
from tidemq.nsq.client import Consumer, Message, NSQClientError

pytestmark = pytest.mark.e2e


async def test_discovers_nsqd_through_lookupd_trying_the_next_lookupd(server: ServerProcess) -> None:
    got: list[bytes] = []

    async def handler(message: Message) -> None:
        got.append(message.body)

    await publish(server.nsqd, "disc", [b"first"])  # the topic exists and is registered
    consumer = Consumer("disc", "ch", lookupd_poll_interval=0.2, lookupd_poll_jitter=0.0)
    consumer.add_handler(handler)
    dead = f"127.0.0.1:{free_port()}"
    await consumer.connect_to_lookupds([dead, server.lookupd_http, server.lookupd_http])
    await eventually(lambda: consumer.stats().connections == 1, what="nsqd found via the second lookupd")
    assert [c.addr for c in consumer.connections()] == [server.nsqd]
    await eventually(lambda: got == [b"first"], what="delivery")
    with pytest.raises(NSQClientError):
        await consumer.disconnect_from_lookupd(f"127.0.0.1:{free_port()}")
    await consumer.disconnect_from_lookupd(dead)
    with pytest.raises(NSQClientError, match="only remaining"):
        await consumer.disconnect_from_lookupd(server.lookupd_http)
    await consumer.stop()


async def test_lookupd_query_headers_and_legacy_answer(server: ServerProcess) -> None:
    """A stand-in lookupd (not a tidemq component) that answers in the pre-1.0 ``data`` wrapper."""

    requests: list[web.Request] = []
    host, port = server.nsqd.rsplit(":", 1)

    async def lookup(request: web.Request) -> web.Response:
        requests.append(request)
        data = {"producers": [{"broadcast_address": host, "tcp_port": int(port)}]}
        return web.json_response({"status_code": 200, "status_txt": "OK", "data": data})

    app = web.Application()
    app.router.add_get("/custom/lookup", lookup)
    runner = web.AppRunner(app)
    await runner.setup()
    lookupd_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", lookupd_port).start()
    got: list[bytes] = []

    async def handler(message: Message) -> None:
        got.append(message.body)

    consumer = Consumer("legacy", "ch", auth_secret="s3cret", lookupd_poll_interval=5.0)
    consumer.add_handler(handler)
    await consumer.connect_to_lookupd(f"http://127.0.0.1:{lookupd_port}/custom/lookup?x=1")
    assert consumer.stats().connections == 1, "the first lookupd is queried at once"
    [request] = requests
    assert request.query["topic"] == "legacy" and request.query["x"] == "1"
    assert request.headers["Accept"] == "application/vnd.nsq; version=1.0"
    assert request.headers["Authorization"] == "Bearer s3cret"
    await publish(server.nsqd, "legacy", [b"via legacy lookupd"])
    await eventually(lambda: got == [b"via legacy lookupd"], what="delivery")
    await consumer.stop()
    await asyncio.wait_for(runner.cleanup(), 10)
