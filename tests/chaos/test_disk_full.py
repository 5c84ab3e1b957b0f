"""Disk full on a small tmpfs the test mounts (tests/store/disk_full_support.py; skipped where mounting is not
permitted): a server with sync flush takes RocketMQ sends and NSQ PUBs until the disk refuses them, space is
freed, load goes on, the server is SIGKILLed and restarted (the queues rebuilt from the log): no acknowledged
message is lost and no queue offset is handed out twice."""

from __future__ import annotations

import collections
import os
import random
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.chaos_support import ChaosServer, Row, Tally, report, rounds
from tests.nsq_support import FrameType, RawNsq
from tests.store.disk_full_support import fill, small_filesystem
from tests.support import RawClient, eventually
from tidemq.remoting.codes import ResponseCode

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

BODY = 8192
MAX_SENDS = 4000  # per phase and protocol: bounds the load whatever the disk does
CYCLES = rounds(short=6, long=40)  # fill-to-the-last-byte / free cycles


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[Path]:
    with small_filesystem(tmp_path / "fs", "48m") as where:
        yield where


def prefill(where: Path, ratio: float, headroom: int) -> Path:
    """Leave ``headroom`` bytes before the server's disk-full ratio: the load, not the filler, reaches it."""
    st = os.statvfs(where)
    total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    size = max(0, free - int(total * (1 - ratio)) - headroom)
    filler = where / "filler"
    with open(filler, "wb") as out:
        for _ in range(size // (1 << 20)):
            out.write(b"\xff" * (1 << 20))
    return filler


def key(body: bytes) -> str:
    return body.rstrip(b".").decode()


class Load:
    """RocketMQ sends (one queue, so offsets are comparable) and NSQ PUBs, each recording what was
    acknowledged and at which queue offset, and how many sends the full disk refused."""

    def __init__(self, server: ChaosServer) -> None:
        self.server = server
        self.rocket = Tally("remoting")
        self.nsq = Tally("nsq")
        self.offsets: dict[str, int] = {}
        self.refused: set[str] = set()
        self.n = 0
        #: The next queue offset of each protocol's queue, if nothing refused ever took one.
        self.next = {"remoting": 0, "nsq": 0}

    async def align(self, block: int) -> None:
        """Send tiny records until each queue's next entry starts a new consume-queue block."""
        for protocol in ("remoting", "nsq"):
            await self.run(False, (-self.next[protocol]) % block, size=16, protocols=(protocol,))

    async def run(
        self,
        until_refused: bool,
        count: int,
        deadline_s: float = 60.0,
        size: int = BODY,
        protocols: tuple[str, ...] = ("remoting", "nsq"),
    ) -> None:
        rocket = await RawClient.open(self.server.proc.broker)
        nsq = await RawNsq.open(self.server.proc.nsqd)
        refused = {p: p not in protocols for p in ("remoting", "nsq")}
        deadline = time.monotonic() + deadline_s
        try:
            for _ in range(count):
                if (until_refused and all(refused.values())) or time.monotonic() > deadline:
                    break
                self.n += 1
                body = f"r-{self.n}-".encode().ljust(size, b".")
                sent = await rocket.send("ChaosFull", body) if "remoting" in protocols else None
                if sent is None:
                    pass
                elif sent.code == ResponseCode.SUCCESS:
                    self.rocket.acknowledged.add(key(body))
                    self.offsets[key(body)] = sent.queue_offset
                    self.next["remoting"] = sent.queue_offset + 1
                else:
                    self.rocket.failed += 1
                    self.refused.add(key(body))
                    refused["remoting"] = True
                if "nsq" not in protocols:
                    continue
                body = f"n-{self.n}-".encode().ljust(size, b".")
                nsq.send("PUB", "chaos_full", body=body)
                try:
                    ftype, data = await nsq.frame()
                except ConnectionError:  # no answer at all: not acknowledged either
                    ftype, data = FrameType.ERROR, b"connection closed"
                if ftype == FrameType.RESPONSE and data == b"OK":
                    self.nsq.acknowledged.add(key(body))
                    self.next["nsq"] += 1
                else:
                    self.nsq.failed += 1
                    self.refused.add(key(body))
                    refused["nsq"] = True
                    nsq.close()  # E_PUB_FAILED is fatal to an nsqd connection
                    nsq = await RawNsq.open(self.server.proc.nsqd)
        finally:
            rocket.close()
            nsq.close()


def forget_queues(data_dir: Path) -> None:
    for folder in data_dir.rglob("consumequeue"):
        shutil.rmtree(folder)
    for checkpoint in data_dir.rglob("checkpoint.json"):
        checkpoint.unlink()


async def free(server: ChaosServer, filler: Path) -> None:
    """Unlink the filler and wait until the server takes writes again."""
    filler.unlink()

    async def accepted() -> bool:
        client = await RawClient.open(server.proc.broker)
        try:
            return (await client.send("ChaosProbe", b"x")).code == ResponseCode.SUCCESS
        finally:
            client.close()

    await eventually(accepted, timeout=30, what="writes accepted once space is freed", interval=0.5)


@pytest.mark.parametrize(
    "ratio",
    [0.9, 1.0],
    ids=["refused-by-the-ratio-guard", "raw-ENOSPC"],
)
async def test_disk_full_then_freed_loses_no_acknowledged_message_and_reuses_no_offset(
    fs: Path, tmp_path: Path, ratio: float
) -> None:
    """0.9 is the default guard (RocketMQ's diskSpaceWarningLevelRatio); 1.0 turns it off, so writes meet
    the file system's own ENOSPC mid-record, the case of issue 23's finding 4."""
    server = await ChaosServer(
        fs / "data", "--flush", "sync", "--disk-full-ratio", str(ratio), log_path=tmp_path / "server.log"
    ).start()
    load = Load(server)
    try:
        admin = await RawClient.open(server.proc.broker)
        await admin.create_topic("ChaosFull", 1)
        admin.close()
        nsq = await RawNsq.open(server.proc.nsqd)
        await nsq.sub("chaos_full", "verify")
        nsq.close()
        await load.run(until_refused=False, count=20)
        # Big records until the disk refuses them, the space freed, then tiny ones until it refuses again.
        filler = prefill(fs, ratio=ratio, headroom=4 << 20)
        await load.run(until_refused=True, count=MAX_SENDS)
        await free(server, filler)
        rng = random.Random()
        for _ in range(CYCLES):
            # Tiny records to a random log position and a queue about to start a new consume-queue block
            # (1024 entries of 20 bytes), then a disk filled to the last byte: the record fits the log but
            # its queue entry does not, the sequence in which a refused write once left its record behind
            # and the next acknowledged publish got its queue offset (issue 23, finding 4).
            await load.run(until_refused=False, count=rng.randint(1, 50), size=16)
            await load.align(1024)
            filler = fill(fs)
            await load.run(until_refused=True, count=400, size=16)
            await load.run(until_refused=False, count=10, size=16)
            await free(server, filler)
            # A few acknowledged writes, then SIGKILL before a checkpoint covers them: recovery re-dispatches
            # the log's tail into the queues, where a refused record left in the log would take the offset.
            await load.run(until_refused=False, count=3, size=16)
            await server.sigkill_and_restart()
        await load.run(until_refused=False, count=100)
        # The last restart rebuilds every queue from the log (its files and the checkpoint gone, as after a
        # lost page cache): a refused record left in the log would take an acknowledged one's offset.
        await server.sigkill_and_restart(lambda: forget_queues(fs / "data"))
        client = await RawClient.open(server.proc.broker)
        drained = await client.drain("ChaosFull", 0, max_pulls=10_000)
        client.close()
        nsq = await RawNsq.open(server.proc.nsqd)
        await nsq.sub("chaos_full", "verify", rdy=2000)
        nsq_bodies = [key(b) for b in await nsq.drain(quiet=2.0, limit=100_000)]
        nsq.close()
    finally:
        await server.stop()
    rocket_bodies = [key(m.body) for m in drained]
    offsets = collections.Counter(m.queue_offset for m in drained)
    reused = {o for o, n in offsets.items() if n > 1}
    at = {key(m.body): m.queue_offset for m in drained}
    moved = {b for b, o in load.offsets.items() if at.get(b, o) != o}
    came_back = load.refused & (set(rocket_bodies) | set(nsq_bodies))
    results = {}
    scenario = f"disk full ({'raw ENOSPC' if ratio == 1.0 else f'ratio {ratio}'}, 48 MiB tmpfs, sync flush)"
    for tally, bodies in ((load.rocket, rocket_bodies), (load.nsq, nsq_bodies)):
        lost, duplicates, missing = tally.check(bodies)
        results[tally.protocol] = (lost, sorted(missing)[:5])
        back = sum(1 for b in came_back if b.startswith(tally.protocol[0]))
        offsets_note = f", {len(reused) + len(moved)} offsets reused" if tally is load.rocket else ""
        report(
            Row(
                f"{scenario} x{CYCLES + 1}, freed, SIGKILL, {tally.protocol}",
                len(tally.acknowledged),
                lost,
                duplicates,
                peak_rss_mb=server.peak_rss_mb,
                note=f"{tally.failed} writes refused, {back} of them consumed{offsets_note}",
            )
        )
    assert load.rocket.failed and load.nsq.failed, "the disk never refused a write"
    assert all(lost == 0 for lost, _ in results.values()), results
    assert not reused and not moved, (reused, sorted(moved)[:5])
    assert not came_back, f"refused writes consumed after all: {sorted(came_back)[:5]}"
