"""A real ``tidemq server`` whose data dir is on a small tmpfs the test fills: every front-end answers its
protocol's error, and nothing refused comes back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.nsq_support import RawNsq
from tests.store.disk_full_support import fill, small_filesystem
from tests.support import RawClient, ServerProcess, eventually
from tidemq.remoting.codes import ResponseCode

pytestmark = pytest.mark.e2e


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[Path]:
    with small_filesystem(tmp_path / "fs", "24m") as where:
        yield where


def _server(fs: Path, tmp_path: Path, *extra: str) -> ServerProcess:
    proc = ServerProcess(fs / "data", *extra)
    proc.log_path = tmp_path / "server.log"  # the log must not fill (or need) the small disk
    return proc.start()


async def test_nsq_pub_refused_by_a_full_disk_gets_e_pub_failed_and_no_offset_twice(
    fs: Path, tmp_path: Path
) -> None:
    """Finding 4: the queue entry's ENOSPC escaped, nsqd dropped the connection, and the next publish got
    the refused message's queue offset. The guard is off (ratio 1.0) so the write meets the raw ENOSPC."""
    proc = _server(fs, tmp_path, "--disk-full-ratio", "1.0")
    try:
        nsq = await RawNsq.open(proc.nsqd)
        assert await nsq.pub("full", b"a0") == b"OK"
        # 1024 entries of 20 bytes end a page exactly: the next entry needs a new block.
        assert await nsq.mpub("full", [f"a{i}".encode() for i in range(1, 1024)]) == b"OK"
        filler = fill(fs)
        nsq.send("PUB", "full", body=b"refused")
        assert (await nsq.error()).startswith(b"E_PUB_FAILED")
        nsq.close()
        filler.unlink()
        nsq = await RawNsq.open(proc.nsqd)
        assert await nsq.pub("full", b"after") == b"OK"
        await nsq.sub("full", "c", rdy=2000)
        bodies = await nsq.drain(quiet=1.0, limit=2000)
        nsq.close()
    finally:
        proc.stop()
    assert bodies[-1] == b"after" and b"refused" not in bodies and len(bodies) == 1025
    assert "disk full" in proc.log_path.read_text()


async def test_disk_over_the_ratio_refuses_on_every_front_end_then_recovers(fs: Path, tmp_path: Path) -> None:
    """Finding 9's other half: disk pressure refuses writes (SERVICE_NOT_AVAILABLE, E_PUB_FAILED, HTTP 503
    EXITING as nsqd answers a failed put) and deletes nothing; freed, writes are taken again."""
    proc = _server(fs, tmp_path)
    try:
        rocket = await RawClient.open(proc.broker)
        await rocket.create_topic("Full", queues=1)
        assert (await rocket.send("Full", b"before")).code == ResponseCode.SUCCESS
        filler = fill(fs)

        async def refused() -> bool:
            return (await rocket.send("Full", b"refused")).code == ResponseCode.SERVICE_NOT_AVAILABLE

        await eventually(refused, timeout=10)
        nsq = await RawNsq.open(proc.nsqd)
        nsq.send("PUB", "nsqfull", body=b"refused")
        assert (await nsq.error()).startswith(b"E_PUB_FAILED")
        nsq.close()
        url = f"http://{proc.nsqd_http}/pub?topic=nsqfull"
        async with aiohttp.ClientSession() as http, http.post(url, data=b"refused") as resp:
            assert resp.status == 503
            assert await resp.json() == {"message": "EXITING"}
        filler.unlink()

        async def accepted() -> bool:
            return (await rocket.send("Full", b"after")).code == ResponseCode.SUCCESS

        await eventually(accepted, timeout=10)
        rocket.close()
    finally:
        proc.stop()
    log = proc.log_path.read_text()
    assert log.count("refusing writes") == 1
    assert "Traceback" not in log
    assert list((fs / "data" / "commitlog").iterdir())
