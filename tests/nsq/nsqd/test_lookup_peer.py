"""nsqd's lookupd registrar against a real ``tidemq nsqlookupd`` process."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import pytest

from tests.nsq_support import LookupdProcess
from tests.support import eventually, free_port
from tidemq.nsq.nsqd.lookup_peer import LookupdRegistrar

pytestmark = pytest.mark.e2e

IDENTITY = {
    "version": "1.3.0",
    "tcp_port": 4150,
    "http_port": 4151,
    "hostname": "registrar-host",
    "broadcast_address": "127.0.0.1",
}
FAST = {"ping_interval_s": 0.2, "min_backoff_s": 0.2, "max_backoff_s": 1.0}


@pytest.fixture
def lookupd(tmp_path: Any) -> Iterator[LookupdProcess]:
    proc = LookupdProcess(tmp_path / "data").start()
    yield proc
    proc.stop()


async def get(session: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with session.get(url) as resp:
        assert resp.headers["X-NSQ-Content-Type"] == "nsq; version=1.0"
        return resp.status, await resp.json()


def producers_of(session: aiohttp.ClientSession, base: str, topic: str) -> Callable[[], Any]:
    async def check() -> list[tuple[str, int, int]] | None:
        status, body = await get(session, f"{base}/lookup?topic={topic}")
        if status != 200:
            return None
        return [(p["broadcast_address"], p["tcp_port"], p["http_port"]) for p in body["producers"]]

    return check


async def test_registers_existing_state_and_events(lookupd: LookupdProcess) -> None:
    state: list[tuple[str, str | None]] = [("lonely", None), ("busy", "c1"), ("busy", "c2")]

    registrar = LookupdRegistrar([lookupd.tcp], IDENTITY, lambda: list(state), **FAST)
    await registrar.start()
    async with aiohttp.ClientSession() as http:
        base = lookupd.http
        me = [("127.0.0.1", 4150, 4151)]
        assert await eventually(producers_of(http, base, "lonely"), timeout=15.0) == me
        assert await eventually(producers_of(http, base, "busy"), timeout=15.0) == me
        assert sorted((await get(http, f"{base}/channels?topic=busy"))[1]["channels"]) == ["c1", "c2"]
        (node,) = (await get(http, f"{base}/nodes"))[1]["producers"]
        assert node["hostname"] == "registrar-host" and sorted(node["topics"]) == ["busy", "lonely"]
        assert registrar.lookupd_http_addresses() == [f"127.0.0.1:{lookupd.http_port}"]

        registrar.register("fresh")
        assert await eventually(producers_of(http, base, "fresh"), timeout=15.0) == me
        registrar.register("fresh", "c#ephemeral")

        async def has_channel() -> bool:
            return (await get(http, f"{base}/channels?topic=fresh"))[1]["channels"] == ["c#ephemeral"]

        await eventually(has_channel, timeout=15.0)
        registrar.unregister("fresh", "c#ephemeral")

        async def channel_gone() -> bool:
            return (await get(http, f"{base}/channels?topic=fresh"))[1]["channels"] == []

        await eventually(channel_gone, timeout=15.0)
        registrar.unregister("lonely")

        async def lonely_gone() -> bool:
            return await producers_of(http, base, "lonely")() == []

        await eventually(lonely_gone, timeout=15.0)
        assert await producers_of(http, base, "busy")() == me
        (peer,) = registrar.peers.values()
        assert peer.connects == 1

        await registrar.close()

        async def all_gone() -> bool:
            return (await get(http, f"{base}/nodes"))[1]["producers"] == []

        await eventually(all_gone, timeout=15.0)


async def test_reregisters_after_lookupd_restart(lookupd: LookupdProcess) -> None:
    state: list[tuple[str, str | None]] = [("before", "ch")]

    registrar = LookupdRegistrar([lookupd.tcp], IDENTITY, lambda: list(state), **FAST)
    await registrar.start()
    async with aiohttp.ClientSession() as http:
        assert await eventually(producers_of(http, lookupd.http, "before"), timeout=15.0)
        await asyncio.to_thread(lookupd.stop)
        state.append(("during", None))
        registrar.register("during")  # dropped while the lookupd is down; the reconnect covers it
        await asyncio.sleep(0.5)
        await asyncio.to_thread(lookupd.start)  # same ports, empty registration DB
        assert await eventually(producers_of(http, lookupd.http, "before"), timeout=15.0)
        assert await eventually(producers_of(http, lookupd.http, "during"), timeout=15.0)
        assert await get(http, f"{lookupd.http}/channels?topic=before") == (200, {"channels": ["ch"]})
        (peer,) = registrar.peers.values()
        assert peer.connects == 2
    await registrar.close()


async def test_dead_address_is_retried_with_backoff(
    lookupd: LookupdProcess, caplog: pytest.LogCaptureFixture
) -> None:
    dead = f"127.0.0.1:{free_port()}"

    with caplog.at_level(logging.DEBUG, logger="tidemq.nsq.nsqd.lookup_peer"):
        registrar = LookupdRegistrar(
            [dead, lookupd.tcp], IDENTITY, lambda: [("alive", None)], ping_interval_s=0.05, max_backoff_s=1.0
        )
        started = time.monotonic()
        await registrar.start()
        async with aiohttp.ClientSession() as http:
            assert await eventually(producers_of(http, lookupd.http, "alive"), timeout=15.0)
            for i in range(300):  # commands while it is down must not each cost a connect attempt
                registrar.register(f"t{i}")
                await asyncio.sleep(0.01)
            assert await eventually(producers_of(http, lookupd.http, "t299"), timeout=15.0)
        peer = registrar.peers[dead]
        elapsed = time.monotonic() - started
        # Backoff 1 s (floor and cap): about one attempt a second, not one per command or ping.
        assert 2 <= peer.connect_attempts <= elapsed + 2, (peer.connect_attempts, elapsed)
        assert peer.connects == 0 and not peer.connected
        await registrar.close()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and dead in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]


async def test_set_addresses_and_error_replies(lookupd: LookupdProcess) -> None:
    dead = f"127.0.0.1:{free_port()}"

    state: list[tuple[str, str | None]] = [("swapped", None)]
    registrar = LookupdRegistrar([dead], IDENTITY, lambda: list(state), **FAST)
    await registrar.start()
    async with aiohttp.ClientSession() as http:
        await registrar.set_addresses([dead, lookupd.tcp])
        assert registrar.addresses == [dead, lookupd.tcp]
        assert await eventually(producers_of(http, lookupd.http, "swapped"), timeout=15.0)

        state.append(("after_error", None))
        registrar.register("bad!name")  # the lookupd answers E_BAD_TOPIC and closes the connection
        registrar.register("after_error")
        assert await eventually(producers_of(http, lookupd.http, "after_error"), timeout=15.0)
        assert await eventually(producers_of(http, lookupd.http, "swapped"), timeout=15.0)
        assert registrar.peers[lookupd.tcp].connects == 2

        await registrar.set_addresses([dead])
        assert registrar.addresses == [dead]

        async def dropped() -> bool:
            return await producers_of(http, lookupd.http, "swapped")() == []

        await eventually(dropped, timeout=15.0)
    with pytest.raises(ValueError):
        await registrar.set_addresses(["no-port"])
    await registrar.close()
