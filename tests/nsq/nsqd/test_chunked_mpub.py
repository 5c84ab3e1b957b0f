"""A big MPUB is stored in chunks (nsqd/chunked_publish.py) and stays all or nothing: a chunk that cannot
be stored, or a crash midway, leaves none of it to be delivered (issue 23, finding 2)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.nsq_support import RawNsq, nsqd_in_process
from tidemq.nsq.nsqd import chunked_publish
from tidemq.nsq.nsqd.server import Nsqd
from tidemq.nsq.protocol import NSQError
from tidemq.store import StoreError

BIG = chunked_publish.BIG_MPUB_MESSAGES + 5


def test_chunks_bound_messages_and_bytes() -> None:
    bodies = [b"x"] * (chunked_publish.CHUNK_MESSAGES + 1) + [b"y" * (3 * 1024 * 1024)] * 3
    sizes = [len(c) for c in chunked_publish.chunks(bodies)]
    assert sum(sizes) == len(bodies)
    assert max(sizes) <= chunked_publish.CHUNK_MESSAGES
    assert sizes[-2:] == [1, 1]  # two 3 MiB messages never share a 4 MiB chunk


async def _consumer(nsqd: Nsqd, topic: str) -> RawNsq:
    consumer = await RawNsq.open(f"127.0.0.1:{nsqd.tcp_port}")
    await consumer.sub(topic, "c", rdy=2500)
    return consumer


async def test_mpub_failing_midway_delivers_none_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with nsqd_in_process(tmp_path) as nsqd:
        consumer = await _consumer(nsqd, "t")
        real_put, calls = nsqd.store.put_batch, []

        def failing_third(*args: object) -> object:
            calls.append(1)
            if len(calls) == 3:
                raise StoreError("disk full: message not stored")
            return real_put(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(nsqd.store, "put_batch", failing_third)
        with pytest.raises(NSQError):
            await nsqd.publish("t", [b"m%d" % i for i in range(BIG)])
        monkeypatch.setattr(nsqd.store, "put_batch", real_put)
        assert nsqd.topics["t"].aborted == [(0, 2 * chunked_publish.CHUNK_MESSAGES)]
        await nsqd.publish("t", [b"after"])
        assert await consumer.drain(0.5) == [b"after"]
        assert nsqd.topics["t"].aborted == []  # the only channel moved past it
        consumer.close()


async def test_mpub_torn_by_a_crash_is_skipped_after_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stalled = asyncio.Event()
    real_give_way, chunks_done = chunked_publish.give_way, []

    async def stall_after_two() -> None:
        chunks_done.append(1)
        if len(chunks_done) == 2:
            stalled.set()
            await asyncio.Event().wait()  # the process "dies" here
        await real_give_way()

    async with nsqd_in_process(tmp_path) as nsqd:
        await nsqd.publish("t", [b"before"])
        monkeypatch.setattr(chunked_publish, "give_way", stall_after_two)
        torn = asyncio.create_task(nsqd.publish("t", [b"m%d" % i for i in range(BIG)]))
        await asyncio.wait_for(stalled.wait(), 5)
        consumer = await _consumer(nsqd, "t")
        assert await consumer.drain(0.3) == [b"before"]  # held while in progress
        consumer.close()
        await asyncio.sleep(0.1)
    # what a crash leaves: the state saved with the MPUB in progress (close saved it); nothing after
    monkeypatch.setattr(Nsqd, "persist", lambda self: None)
    torn.cancel()
    await asyncio.gather(torn, return_exceptions=True)
    monkeypatch.undo()
    async with nsqd_in_process(tmp_path) as nsqd:
        assert nsqd.topics["t"].aborted == [(1, 1 + 2 * chunked_publish.CHUNK_MESSAGES)]
        await nsqd.publish("t", [b"after"])
        consumer = await _consumer(nsqd, "t")
        assert await consumer.drain(0.5) == [b"after"]
        consumer.close()


async def test_a_channel_created_during_an_mpub_gets_all_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stalled, release = asyncio.Event(), asyncio.Event()
    real_give_way, chunks_done = chunked_publish.give_way, []

    async def pause_after_two() -> None:
        chunks_done.append(1)
        if len(chunks_done) == 2:
            stalled.set()
            await release.wait()
        await real_give_way()

    async with nsqd_in_process(tmp_path) as nsqd:
        topic = nsqd.topic("t")
        topic.channel("a")
        monkeypatch.setattr(chunked_publish, "give_way", pause_after_two)
        mpub = asyncio.create_task(nsqd.publish("t", [b"m%d" % i for i in range(BIG)]))
        await asyncio.wait_for(stalled.wait(), 5)
        assert topic.channel("a").depth == 0  # held
        late = topic.channel("b")
        release.set()
        await mpub
        assert late.depth == topic.channel("a").depth == BIG
        # /stats counts every chunk's bodies once (summed chunk by chunk)
        assert topic.message_count == BIG
        assert topic.message_bytes == sum(len(b"m%d" % i) for i in range(BIG))


async def test_aborted_mpub_is_not_depth_and_is_pruned_once_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An MPUB refused midway (disk full on its third chunk): its stored chunks are not counted as depth
    (topic or channel, what /stats reports), and its aborted range is forgotten once every channel has
    moved past it."""
    async with nsqd_in_process(tmp_path) as nsqd:
        real_put = nsqd.store.put_batch
        nsqd.topic("t").channel("c")  # "t" has a channel; "bare" keeps its backlog in the topic
        for name in ("t", "bare"):
            calls: list[int] = []

            def failing_third(*args: object, calls: list[int] = calls) -> object:
                calls.append(1)
                if len(calls) == 3:
                    raise StoreError("disk full: message not stored")
                return real_put(*args)  # type: ignore[arg-type]

            monkeypatch.setattr(nsqd.store, "put_batch", failing_third)
            with pytest.raises(NSQError):
                await nsqd.publish(name, [b"m%d" % i for i in range(BIG)])
            monkeypatch.setattr(nsqd.store, "put_batch", real_put)
            await nsqd.publish(name, [b"real1", b"real2", b"real3"])
            assert nsqd.topics[name].aborted == [(0, 2 * chunked_publish.CHUNK_MESSAGES)]
        topic, bare = nsqd.topics["t"], nsqd.topics["bare"]
        assert topic.channel("c").depth == 3
        assert bare.depth == 3
        for name, state in (("t", topic), ("bare", bare)):
            consumer = await _consumer(nsqd, name)
            assert await consumer.drain(0.5) == [b"real1", b"real2", b"real3"]
            assert state.aborted == []
            assert state.snapshot()["aborted"] is None
            consumer.close()
