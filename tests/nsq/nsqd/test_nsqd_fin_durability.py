"""A FIN survives an nsqd SIGKILL: what a consumer finished is not delivered again after a restart.

With ``--flush sync`` a FIN is durable before nsqd writes the consumer anything after it, so a consumer
that saw any later frame (a message, a response, a heartbeat) knows its FINs are safe. With async flush
the FIN journal is written every 50 ms (fsynced every flush interval), so FINs older than that survive a
process crash. Un-FINed messages come back either way.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from tests.nsq_support import RawNsq, nsqd_in_process
from tests.support import ServerProcess, free_port, hold_fsync, run, wait_for
from tidemq.nsq.protocol import Message
from tidemq.store import FlushMode

pytestmark = pytest.mark.e2e

TOPIC = "fins"
COUNT = 600


def _kept(body: bytes) -> bool:
    """Every sixth message is left un-FINed (in flight when the process dies)."""
    return int(body[1:]) % 6 == 0


async def _receive(srv: ServerProcess) -> tuple[RawNsq, list[Message]]:
    """Publish COUNT messages and receive them all on channel "ch" (all in flight)."""
    pub = await RawNsq.open(srv.nsqd)
    sub = await RawNsq.open(srv.nsqd)
    await sub.sub(TOPIC, "ch", rdy=COUNT)
    assert await pub.mpub(TOPIC, [b"m%d" % i for i in range(COUNT)]) == b"OK"
    pub.close()
    return sub, [await sub.message() for _ in range(COUNT)]


def _fin_all_but_kept(sub: RawNsq, messages: list[Message]) -> tuple[set[bytes], set[bytes]]:
    """FIN every message but the kept ones: (FINed bodies, kept bodies)."""
    finished: set[bytes] = set()
    kept: set[bytes] = set()
    for m in messages:
        if _kept(m.body):
            kept.add(m.body)
        else:
            sub.send("FIN", m.id)
            finished.add(m.body)
    return finished, kept


def _restart_and_drain(srv: ServerProcess) -> list[bytes]:
    srv.kill()
    srv.nsqd_port, srv.nsqd_http_port = free_port(), free_port()
    srv.start()

    async def drain() -> list[bytes]:
        sub = await RawNsq.open(srv.nsqd)
        await sub.sub(TOPIC, "ch", rdy=500)
        bodies = await sub.drain(quiet=1.5)
        sub.close()
        return bodies

    result: list[bytes] = run(drain())
    return result


@pytest.mark.parametrize("command", ["nsqd", "server"])
def test_sync_flush_a_fin_followed_by_a_frame_never_comes_back(tmp_path: Path, command: str) -> None:
    """FIN 500 of 600 on a channel created moments ago, see one frame after the last FIN (the answer to
    a PUB on the same connection), SIGKILL at once: after the restart only the 100 un-FINed come back."""
    srv = ServerProcess(tmp_path / "data", "--flush", "sync", command=command).start()

    async def before() -> tuple[set[bytes], set[bytes]]:
        sub, messages = await _receive(srv)
        finished, kept = _fin_all_but_kept(sub, messages)
        assert await sub.pub("marker", b"after the FINs") == b"OK"  # a frame written after every FIN
        return finished, kept

    try:
        finished, kept = run(before())
        got = _restart_and_drain(srv)
        assert not finished & set(got), f"{len(finished & set(got))} FINed messages came back"
        assert sorted(got) == sorted(kept), "every un-FINed message comes back, once"
    finally:
        assert srv.stop() == 0


def test_async_flush_fins_older_than_the_journal_interval_never_come_back(tmp_path: Path) -> None:
    """Async flush: FINs made right after a periodic state snapshot, and 300 ms (well past the journal's
    50 ms write interval, well before the next snapshot) before a SIGKILL, are not delivered again; the
    un-FINed ones are."""
    srv = ServerProcess(tmp_path / "data", command="nsqd").start()
    state = tmp_path / "data" / "nsq" / "nsqd.json"

    async def before() -> tuple[set[bytes], set[bytes]]:
        sub, messages = await _receive(srv)
        written = state.stat().st_mtime_ns if state.exists() else 0
        await asyncio.to_thread(  # the periodic snapshot of all 600 in flight: the next is a second away
            wait_for, lambda: state.exists() and state.stat().st_mtime_ns != written, 5.0, 0.005
        )
        finished, kept = _fin_all_but_kept(sub, messages)
        await asyncio.sleep(0.3)
        return finished, kept

    try:
        finished, kept = run(before())
        got = _restart_and_drain(srv)
        assert not finished & set(got), f"{len(finished & set(got))} FINed messages came back"
        assert sorted(got) == sorted(kept)
    finally:
        assert srv.stop() == 0


def test_a_topic_created_just_before_a_sigkill_keeps_its_acknowledged_messages(tmp_path: Path) -> None:
    """A topic's first PUB, answered, then SIGKILL before any periodic state write: the topic and its
    messages are there after the restart (nsqd writes its metadata when a topic or channel appears)."""
    srv = ServerProcess(tmp_path / "data", "--flush", "sync", command="nsqd").start()

    async def publish() -> None:
        pub = await RawNsq.open(srv.nsqd)
        assert await pub.mpub(TOPIC, [b"m%d" % i for i in range(50)]) == b"OK"
        pub.close()

    try:
        run(publish())
        got = _restart_and_drain(srv)
        assert sorted(got) == sorted(b"m%d" % i for i in range(50))
    finally:
        assert srv.stop() == 0


async def test_sync_flush_holds_what_follows_a_fin_until_the_fin_is_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing nsqd writes after a FIN reaches the consumer before that FIN is fsynced: the message the
    FIN's freed RDY credit lets through waits for the FIN journal's fsync, then arrives."""

    async with nsqd_in_process(tmp_path, FlushMode.SYNC) as nsqd:
        addr = f"127.0.0.1:{nsqd.tcp_port}"
        pub, sub = await RawNsq.open(addr), await RawNsq.open(addr)
        release = threading.Event()
        try:
            await sub.sub("gated", "ch", rdy=1)
            assert await pub.mpub("gated", [b"a", b"b"]) == b"OK"
            first = await sub.message()
            inside, release = hold_fsync(monkeypatch)
            sub.send("FIN", first.id)
            assert await asyncio.to_thread(inside.wait, 10)  # the FIN's fsync is under way
            with pytest.raises(TimeoutError):
                await sub.message(timeout=0.3)  # "b" may not be seen before the FIN is durable
            release.set()
            assert (await sub.message()).body == b"b"
        finally:
            release.set()
            monkeypatch.undo()
            sub.close()
            pub.close()
