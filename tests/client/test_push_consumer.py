"""The push consumer against a real ``tidemq server``: delivery, filters, retries, flow control, offsets."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest

from tests.consumer_support import Collector, consumer, produce
from tests.support import RawClient, ServerProcess, create_topic, eventually
from tidemq.broker.broker import Broker
from tidemq.broker.config import BrokerConfig
from tidemq.client.consumer import ConsumeContext, ConsumeFromWhere, ConsumeStatus, MessageModel
from tidemq.namesrv import NameServer
from tidemq.record import MessageExt
from tidemq.store import StoreConfig

FIRST = ConsumeFromWhere.FIRST_OFFSET


@pytest.mark.e2e
async def test_every_message_once_and_offsets_committed(server: ServerProcess) -> None:
    await produce(server.namesrv, "PushOnce", 200)
    got = Collector()
    c = consumer(server.namesrv, "OnceGroup", "PushOnce", got, consume_from_where=FIRST)
    await c.start()
    await eventually(lambda: len(got.distinct()) == 200, what="200 messages", timeout=20.0)
    await c.drain()
    await c.shutdown()
    assert got.duplicates() == {}
    m = got.deliveries[0]
    assert m.topic == "PushOnce" and m.broker_name == "broker-a" and m.store_timestamp > 0
    assert m.born_timestamp > 0 and m.msg_id and m.reconsume_times == 0 and "MAX_OFFSET" in m.properties
    raw = await RawClient.open(server.broker)
    for q in range(4):
        committed = await raw.call(14, {"consumerGroup": "OnceGroup", "topic": "PushOnce", "queueId": str(q)})
        top = await raw.call(30, {"topic": "PushOnce", "queueId": str(q)})
        assert committed.ext_fields["offset"] == top.ext_fields["offset"], "shutdown persists offsets"
    raw.close()
    again = Collector()
    c2 = consumer(server.namesrv, "OnceGroup", "PushOnce", again, consume_from_where=FIRST)
    await c2.start()
    await produce(server.namesrv, "PushOnce", 5, prefix="late")
    await eventually(lambda: len(again.distinct()) == 5, what="late messages", timeout=20.0)
    await asyncio.sleep(0.5)
    await c2.shutdown()
    assert again.distinct() == {f"late{i}".encode() for i in range(5)}, "a restart resumes at the offsets"


async def test_consume_from_where_after_retention(tmp_path: Path) -> None:
    """Once retention moved a queue's min offset past 0, a new group really starts where its policy says."""

    ns = NameServer("127.0.0.1", 0)
    await ns.start()
    broker = Broker(
        BrokerConfig(port=0, namesrv_addrs=[f"127.0.0.1:{ns.port}"]),
        StoreConfig(tmp_path, segment_bytes=64 * 1024, file_reserved_hours=1.0),
    )
    await broker.start()
    namesrv = f"127.0.0.1:{ns.port}"
    try:
        await create_topic(f"127.0.0.1:{broker.server.port}", "Aged", 1)
        await produce(namesrv, "Aged", 800, prefix="old")
        for seg in broker.store.commitlog.segments[:-1]:
            os.utime(seg.path, (time.time() - 7200, time.time() - 7200))
        assert await broker.store.apply_retention() > 0
        low = broker.store.min_offset("Aged", 0)
        assert low > 0
        # The search answers the *nearest* store time (spec 2.6) at one-second resolution. The stamp is
        # taken (truncated to the second) over 2 s after the last old message and just before the first
        # new one, so the new one is nearer even when a loaded machine is slow to send it.
        await asyncio.sleep(3.1)
        stamp = time.strftime("%Y%m%d%H%M%S", time.localtime())
        await produce(namesrv, "Aged", 10, prefix="new")
        last, first, by_time = Collector(), Collector(), Collector()
        cs = [
            consumer(namesrv, "AgedLast", "Aged", last),
            consumer(namesrv, "AgedFirst", "Aged", first, consume_from_where=FIRST),
            consumer(
                namesrv,
                "AgedTime",
                "Aged",
                by_time,
                consume_from_where=ConsumeFromWhere.TIMESTAMP,
                consume_timestamp=stamp,
            ),
        ]
        for c in cs:
            await c.start()
        await eventually(
            lambda: len(first.distinct()) == 810 - low,
            what="first offset: all that is left",
            timeout=20.0,
        )
        await eventually(
            lambda: all(any(q.topic == "Aged" for q in c.rebalancer.process_queues) for c in cs),
            what="every group has placed its start offset",
            timeout=20.0,
        )
        await produce(namesrv, "Aged", 3, prefix="live")
        try:
            await eventually(
                lambda: len(last.distinct()) == 3 and len(by_time.distinct()) == 13,
                what="the others",
                timeout=20.0,
            )
        except AssertionError:
            raise AssertionError(
                f"last={sorted(last.distinct())} by_time={sorted(by_time.distinct())}"
            ) from None
        for c in cs:
            await c.shutdown()
        assert last.distinct() == {b"live0", b"live1", b"live2"}, "LAST_OFFSET starts at the queue's end"
        assert all(b.startswith((b"new", b"live")) for b in by_time.bodies), "TIMESTAMP skips older messages"
    finally:
        await broker.close()
        await ns.close()


@pytest.mark.e2e
async def test_tag_filter(server: ServerProcess) -> None:
    await produce(
        server.namesrv,
        "PushTags",
        60,
        tags=lambda i: "A" if i % 3 == 0 else ("B" if i % 3 == 1 else None),
    )
    got = Collector()
    c = consumer(server.namesrv, "TagsGroup", "PushTags", got, expression="A", consume_from_where=FIRST)
    await c.start()
    await eventually(lambda: len(got.distinct()) == 20, what="the 20 A messages", timeout=20.0)
    await asyncio.sleep(0.5)
    await c.shutdown()
    assert {m.tags for m in got.deliveries} == {"A"} and len(got.deliveries) == 20


@pytest.mark.e2e
async def test_retries_count_up_then_dead_letter(server: ServerProcess) -> None:
    """A message that always fails comes back with reconsumeTimes 1, 2, ... then lands in %DLQ%<group>."""

    await produce(server.namesrv, "PushRetry", 3)
    got = Collector(fail=lambda m: m.body == b"m1")
    c = consumer(
        server.namesrv, "RetryGroupP", "PushRetry", got, consume_from_where=FIRST, max_reconsume_times=2
    )
    await c.start()
    await eventually(lambda: got.bodies.count(b"m1") == 3, timeout=30, what="m1 three times")
    await c.shutdown()
    times = [m.reconsume_times for m in got.deliveries if m.body == b"m1"]
    assert times == [0, 1, 2]
    assert all(m.topic == "PushRetry" for m in got.deliveries), "retry topic is restored to the original"
    assert got.bodies.count(b"m0") == 1 and got.bodies.count(b"m2") == 1
    raw = await RawClient.open(server.broker)
    deadline = time.monotonic() + 10
    dead: list = []  # type: ignore[type-arg]
    while not dead and time.monotonic() < deadline:
        _, dead = await raw.pull("%DLQ%RetryGroupP", 0, 0)
        await asyncio.sleep(0.2)
    raw.close()
    assert [m.body for m in dead] == [b"m1"]


@pytest.mark.e2e
async def test_listener_exception_and_none_mean_retry(server: ServerProcess) -> None:
    await produce(server.namesrv, "PushRaise", 2)
    seen: list[bytes] = []

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]  # a plain function: runs on the consume pool
        seen.extend(m.body for m in msgs)
        if msgs[0].reconsume_times == 0:
            if msgs[0].body == b"m0":
                raise RuntimeError("boom")
            return None
        return ConsumeStatus.CONSUME_SUCCESS

    c = consumer(server.namesrv, "RaiseGroup", "PushRaise", listener, consume_from_where=FIRST)
    await c.start()
    await eventually(lambda: sorted(seen) == [b"m0", b"m0", b"m1", b"m1"], timeout=20, what="two retries")
    await c.shutdown()


@pytest.mark.e2e
async def test_flow_control_holds_the_process_queue_under_its_threshold(server: ServerProcess) -> None:
    await create_topic(server.broker, "Flow", 1)
    await produce(server.namesrv, "Flow", 300)
    got = Collector(delay=0.01)
    c = consumer(
        server.namesrv,
        "FlowGroup",
        "Flow",
        got,
        consume_from_where=FIRST,
        pull_threshold_for_queue=40,
        pull_batch_size=16,
        consume_thread_max=2,
    )
    await c.start()
    peak = 0
    deadline = time.monotonic() + 30
    while len(got.distinct()) < 300 and time.monotonic() < deadline:
        for pq in c.rebalancer.process_queues.values():
            peak = max(peak, pq.msg_count)
        await asyncio.sleep(0.005)
    await c.shutdown()
    assert len(got.distinct()) == 300
    assert 0 < peak <= 40 + 16, f"process queue peaked at {peak}"


@pytest.mark.e2e
async def test_pause_and_resume(server: ServerProcess) -> None:
    await create_topic(server.broker, "PauseQ")
    got = Collector()
    c = consumer(
        server.namesrv, "PauseQGroup", "PauseQ", got, consume_from_where=FIRST, suspend_timeout_ms=500
    )
    await c.start()
    await produce(server.namesrv, "PauseQ", 10, prefix="a")
    await eventually(lambda: len(got.distinct()) == 10, what="before pause", timeout=20.0)
    c.pause()
    await asyncio.sleep(1.0)
    await produce(server.namesrv, "PauseQ", 10, prefix="b")
    await asyncio.sleep(1.5)
    assert len(got.distinct()) == 10, "nothing is consumed while paused"
    c.resume()
    await eventually(lambda: len(got.distinct()) == 20, what="after resume", timeout=20.0)
    await c.shutdown()


@pytest.mark.e2e
async def test_broadcasting_gives_everyone_everything_and_offsets_survive(
    server: ServerProcess, tmp_path: Path
) -> None:
    await create_topic(server.broker, "Bcast")
    got = [Collector(), Collector()]
    cs = [
        consumer(
            server.namesrv,
            "BcastGroup",
            "Bcast",
            got[i],
            consume_from_where=FIRST,
            message_model=MessageModel.BROADCASTING,
            offset_store_dir=tmp_path / f"c{i}",
        )
        for i in range(2)
    ]
    for c in cs:
        c.config.instance_name = f"bcast-{id(c)}"
        await c.start()
    await produce(server.namesrv, "Bcast", 30)
    for g in got:
        await eventually(lambda g=g: len(g.distinct()) == 30, what="broadcast delivery", timeout=20.0)
    for c in cs:
        await c.drain()
        await c.shutdown()
    stored = list((tmp_path / "c0").rglob("offsets.json"))
    assert stored, "broadcasting offsets are written to a local file"
    again = Collector()
    c = consumer(
        server.namesrv,
        "BcastGroup",
        "Bcast",
        again,
        consume_from_where=FIRST,
        message_model=MessageModel.BROADCASTING,
        offset_store_dir=tmp_path / "c0",
    )
    c.config.instance_name = cs[0].config.instance_name
    await c.start()
    await produce(server.namesrv, "Bcast", 5, prefix="x")
    await eventually(lambda: len(again.distinct()) == 5, what="only new messages after restart", timeout=20.0)
    await asyncio.sleep(0.5)
    await c.shutdown()
    assert again.distinct() == {f"x{i}".encode() for i in range(5)}


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["coroutine", "plain"])
async def test_concurrent_pool_consumes_one_queue_in_parallel(server: ServerProcess, kind: str) -> None:
    """Single-message requests cut from one pulled batch run on ``consume_thread_max`` workers at once,
    whether the listener awaits on the loop or blocks on the pool: a worker whose listener suspends while
    requests remain brings in the next one, so a slow listener does not leave the rest of the batch
    waiting behind it."""
    await create_topic(server.broker, f"Parallel{kind}", 1)
    await produce(server.namesrv, f"Parallel{kind}", 24)
    lock = threading.Lock()
    running, peak, seen = 0, 0, set()

    def enter(msgs: list[MessageExt]) -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
            seen.update(m.body for m in msgs)

    def leave() -> None:
        nonlocal running
        with lock:
            running -= 1

    async def on_loop(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        enter(msgs)
        await asyncio.sleep(0.2)
        leave()
        return ConsumeStatus.CONSUME_SUCCESS

    def on_pool(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        enter(msgs)
        time.sleep(0.2)
        leave()
        return ConsumeStatus.CONSUME_SUCCESS

    listener = on_loop if kind == "coroutine" else on_pool
    c = consumer(
        server.namesrv,
        f"Parallel{kind}Group",
        f"Parallel{kind}",
        listener,
        consume_from_where=FIRST,
        consume_thread_max=6,
    )
    await c.start()
    await eventually(lambda: len(seen) == 24, what="24 messages", timeout=20.0)
    await c.shutdown()
    assert peak == 6, f"at most {peak} listener calls ran at once, not consume_thread_max (6)"
