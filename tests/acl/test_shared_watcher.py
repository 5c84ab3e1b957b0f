"""``tidemq server --acl-file``: the broker and nsqd apply one set of rules, read by one watcher, so one
change to the file reaches both front-ends at once and is read once (the server runs in this process so
its tasks can be counted)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

import orjson
import pytest

from tests.nsq_support import RawNsq
from tests.support import eventually, free_port
from tidemq.broker.config import BrokerConfig
from tidemq.embedded import ServerPlan, serve
from tidemq.nsq.nsqd.config import NsqdConfig
from tidemq.remoting.acl_signature import sign_request
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.transport import connect
from tidemq.store import StoreConfig

pytestmark = pytest.mark.e2e

ACCOUNT = "  - accessKey: {key}\n    secretKey: {key}-secret\n    defaultTopicPerm: PUB|SUB\n"


def write(acl: Path, *keys: str) -> None:
    acl.write_text("accounts:\n" + "".join(ACCOUNT.format(key=k) for k in keys))
    bump = max(acl.stat().st_mtime_ns, time.time_ns()) + 1_000_000_000  # a new mtime even within one tick
    os.utime(acl, ns=(bump, bump))


def watcher_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "AclWatcher._watch"]  # type: ignore[union-attr]


async def remoting_allowed(broker: str, key: str) -> bool:
    request = RemotingCommand(RequestCode.GET_MAX_OFFSET, ext_fields={"topic": "SharedAcl", "queueId": "0"})
    sign_request(request, key, f"{key}-secret")
    host, port = broker.rsplit(":", 1)
    conn = await connect(host, int(port))
    try:
        return (await conn.invoke(request, timeout=5.0)).code != ResponseCode.NO_PERMISSION
    finally:
        conn.close()


async def nsq_allowed(nsqd: str, key: str) -> bool:
    client = await RawNsq.open(nsqd)
    try:
        assert (await client.identify())["auth_required"] is True
        client.send("AUTH", body=f"{key}:{key}-secret".encode())
        _, data = await client.frame()
        return orjson.loads(data).get("identity") == key if data.startswith(b"{") else False
    finally:
        client.close()


async def test_one_watcher_serves_the_broker_and_nsqd(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    acl = tmp_path / "plain_acl.yml"
    write(acl, "firstkey")
    broker_port, nsqd_port = free_port(), free_port()
    plan = ServerPlan(
        "127.0.0.1",
        free_port(),
        BrokerConfig(port=broker_port, acl_file=str(acl)),
        StoreConfig(tmp_path / "data"),
        NsqdConfig(tcp_port=nsqd_port, http_port=None, acl_file=str(acl)),
    )
    ready, stop = asyncio.Event(), asyncio.Event()
    plan.on_ready = lambda _: ready.set()
    server = asyncio.create_task(serve(plan, stop))
    try:
        await asyncio.wait_for(ready.wait(), 20)
        broker, nsqd = f"127.0.0.1:{broker_port}", f"127.0.0.1:{nsqd_port}"
        assert len(watcher_tasks()) == 1
        assert await remoting_allowed(broker, "firstkey") and await nsq_allowed(nsqd, "firstkey")
        assert not await remoting_allowed(broker, "secondkey") and not await nsq_allowed(nsqd, "secondkey")

        caplog.set_level(logging.INFO, logger="tidemq.acl.accounts")
        write(acl, "secondkey")
        await eventually(
            lambda: remoting_allowed(broker, "secondkey"), 10, "the broker applying the new rules"
        )
        assert await nsq_allowed(nsqd, "secondkey")
        assert not await nsq_allowed(nsqd, "firstkey") and not await remoting_allowed(broker, "firstkey")
        await asyncio.sleep(1.0)  # every watcher there is has had its turn
        reloads = [r for r in caplog.records if r.getMessage().startswith("acl: reloaded")]
        assert len(reloads) == 1, [r.getMessage() for r in reloads]
        assert len(watcher_tasks()) == 1
    finally:
        stop.set()
        await asyncio.wait_for(server, 20)
    assert watcher_tasks() == []
