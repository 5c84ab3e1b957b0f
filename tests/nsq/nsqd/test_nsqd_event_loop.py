"""``tidemq nsqd --event-loop uvloop``: the server runs on uvloop's loop (its ready line names it) and
publishes and delivers as on asyncio's; with sync flush an OK still means the PUB survives a kill -9."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.nsq_support import RawNsq
from tests.support import ServerProcess

pytestmark = pytest.mark.e2e


async def test_nsqd_on_uvloop_publishes_and_delivers(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", "--event-loop", "uvloop", command="nsqd").start()
    try:
        assert srv.ready_line.endswith("event loop uvloop"), srv.ready_line
        sub = await RawNsq.open(srv.nsqd)
        await sub.sub("looped", "ch", rdy=10)
        pub = await RawNsq.open(srv.nsqd)
        assert await pub.pub("looped", b"one") == b"OK"
        assert await pub.mpub("looped", [b"two", b"three"]) == b"OK"
        assert [(await sub.message()).body for _ in range(3)] == [b"one", b"two", b"three"]
        pub.close()
        sub.close()
    finally:
        assert srv.stop() == 0


async def test_the_default_loop_is_not_named(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", command="nsqd").start()
    try:
        assert "event loop" not in srv.ready_line, srv.ready_line
    finally:
        assert srv.stop() == 0


async def test_sync_flush_on_uvloop_answers_only_what_survives_a_kill(tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = ServerProcess(data, "--event-loop", "uvloop", "--flush", "sync", command="nsqd").start()
    try:
        pub = await RawNsq.open(srv.nsqd)
        for i in range(20):
            assert await pub.pub("kept", b"m%d" % i) == b"OK"
        pub.close()
    finally:
        srv.kill()
    again = ServerProcess(data, command="nsqd").start()
    try:
        sub = await RawNsq.open(again.nsqd)
        await sub.sub("kept", "ch", rdy=50)
        assert [(await sub.message()).body for _ in range(20)] == [b"m%d" % i for i in range(20)]
        sub.close()
    finally:
        assert again.stop() == 0
