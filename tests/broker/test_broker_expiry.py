"""Timers that run in minutes in production, checked with short settings on an in-process broker."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import orjson

from tests.support import RawClient
from tidemq.broker.broker import Broker
from tidemq.broker.config import BrokerConfig
from tidemq.broker.locks import RebalanceLockManager
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.store import StoreConfig


def test_queue_lock_expires_after_its_lease() -> None:
    locks = RebalanceLockManager(max_live_s=0.05)
    mq = ("T", "b", 0)
    assert locks.try_lock_batch("G", [mq], "c1") == [mq]
    assert locks.try_lock_batch("G", [mq], "c2") == []
    time.sleep(0.1)
    assert locks.holder("G", mq) is None
    assert locks.try_lock_batch("G", [mq], "c2") == [mq]


async def test_silent_client_channel_expires_and_group_is_told(tmp_path: Path) -> None:
    config = BrokerConfig(port=0, channel_expiry_s=0.4, register_interval_s=60)
    broker = Broker(config, StoreConfig(tmp_path))
    await broker.start()
    try:
        addr = f"127.0.0.1:{broker.server.port}"
        quiet = await RawClient.open(addr, "127.0.0.1@quiet")
        lively = await RawClient.open(addr, "127.0.0.1@lively")
        await quiet.heartbeat("ExpGroup", {"ExpTopic": "*"})
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            await lively.heartbeat("ExpGroup", {"ExpTopic": "*"})
            await asyncio.sleep(0.1)
            ids = broker.clients.consumer_ids("ExpGroup")
            if ids == ["127.0.0.1@lively"]:
                break
        assert broker.clients.consumer_ids("ExpGroup") == ["127.0.0.1@lively"]
        with contextlib.suppress(TimeoutError):  # the close reaches the client a loop turn later
            await asyncio.wait_for(asyncio.shield(quiet.conn.closed), 2)
        assert quiet.conn.is_closed, "an expired channel is closed"
        notes = [r for r in lively.received if r.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED]
        assert notes, "the rest of the group is told to rebalance"
        resp = await lively.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "ExpGroup"})
        assert resp.code == ResponseCode.SUCCESS
        assert orjson.loads(resp.body)["consumerIdList"] == ["127.0.0.1@lively"]
        lively.close()
    finally:
        await broker.close()


async def test_idle_connection_is_closed(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig(port=0, idle_timeout_s=0.3, register_interval_s=60), StoreConfig(tmp_path))
    await broker.start()
    try:
        idle = await RawClient.open(f"127.0.0.1:{broker.server.port}")
        await asyncio.wait_for(idle.conn.closed, 3)
    finally:
        await broker.close()
