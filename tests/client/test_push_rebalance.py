"""Rebalance and orderly consumption with several consumer instances against a real server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.consumer_support import Collector, consumer, produce
from tests.support import ServerProcess, create_topic, eventually
from tidemq.client.consumer import ConsumeFromWhere, ConsumeStatus

pytestmark = pytest.mark.e2e

FIRST = ConsumeFromWhere.FIRST_OFFSET


def _owned(c) -> list[int]:  # type: ignore[no-untyped-def]
    return sorted(mq.queue_id for mq in c.rebalancer.process_queues if not mq.topic.startswith("%"))


async def test_queues_move_as_instances_join_and_leave(server: ServerProcess) -> None:
    await create_topic(server.broker, "Rebal", 6)
    got = Collector()
    group = "RebalGroup"
    first = consumer(server.namesrv, group, "Rebal", got, consume_from_where=FIRST)
    await first.start()
    await eventually(
        lambda: _owned(first) == list(range(6)), what="one instance owns all six queues", timeout=20.0
    )
    await produce(server.namesrv, "Rebal", 60, prefix="a")
    await eventually(lambda: len(got.distinct()) == 60, what="first batch", timeout=20.0)
    await first.drain()

    second = consumer(server.namesrv, group, "Rebal", got, consume_from_where=FIRST)
    third = consumer(server.namesrv, group, "Rebal", got, consume_from_where=FIRST)
    await second.start()
    await eventually(
        lambda: len(_owned(first)) == 3 and len(_owned(second)) == 3, what="split in two", timeout=20.0
    )
    await third.start()
    members = (first, second, third)
    await eventually(
        lambda: sorted(len(_owned(c)) for c in members) == [2, 2, 2], what="split in three", timeout=20.0
    )
    assert sorted(q for c in members for q in _owned(c)) == list(range(6)), "each queue has one owner"
    await produce(server.namesrv, "Rebal", 90, prefix="b")
    await eventually(
        lambda: len(got.distinct()) == 150, what="second batch across three instances", timeout=20.0
    )
    for c in members:
        await c.drain()
    await third.shutdown()
    await eventually(
        lambda: sorted(len(_owned(c)) for c in (first, second)) == [3, 3], what="third left", timeout=20.0
    )
    await second.shutdown()
    await eventually(lambda: _owned(first) == list(range(6)), what="only the first is left", timeout=20.0)
    await produce(server.namesrv, "Rebal", 30, prefix="c")
    await eventually(lambda: len(got.distinct()) == 180, what="third batch", timeout=20.0)
    await first.drain()
    await first.shutdown()
    assert got.duplicates() == {}, "with offsets persisted on every hand-over nothing is consumed twice"


async def test_orderly_keeps_per_queue_order_through_failures_and_a_rebalance(server: ServerProcess) -> None:
    await create_topic(server.broker, "Ordered", 4)
    failed_once: set[bytes] = set()

    def flaky(msg) -> bool:  # type: ignore[no-untyped-def]
        if msg.body.endswith(b"7") and msg.body not in failed_once:
            failed_once.add(msg.body)
            return True
        return False

    got = Collector(fail=flaky, ok=ConsumeStatus.SUCCESS, retry=ConsumeStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT)
    a = consumer(server.namesrv, "OrderGroup", "Ordered", got, orderly=True, consume_from_where=FIRST)
    await a.start()
    # four order keys; each key's messages go to one queue in sequence
    await produce(server.namesrv, "Ordered", 80, prefix="", sharding=lambda i: f"key-{i % 4}")
    await eventually(
        lambda: len(got.distinct()) >= 30, what="some progress before the second instance", timeout=20.0
    )
    b = consumer(server.namesrv, "OrderGroup", "Ordered", got, orderly=True, consume_from_where=FIRST)
    await b.start()
    await produce(server.namesrv, "Ordered", 80, prefix="", sharding=lambda i: f"key-{i % 4}", start=80)
    await eventually(lambda: len(got.distinct()) == 160, timeout=40, what="all ordered messages")
    await a.shutdown()
    await b.shutdown()
    by_key: dict[int, list[int]] = {}
    for m in got.deliveries:
        n = int(m.body)
        by_key.setdefault(n % 4, []).append(n)
    for key, seq in by_key.items():
        firsts: list[int] = []
        for n in seq:
            if n not in firsts:
                firsts.append(n)
        assert firsts == sorted(firsts), f"key {key} was consumed out of order: {firsts}"
    assert failed_once, "the listener failed some batches"
    for body in failed_once:
        assert got.bodies.count(body) >= 2, f"{body!r} failed once and must be consumed again"


async def test_broker_restart_mid_stream(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data").start()
    try:
        await create_topic(srv.broker, "Restarted")
        got = Collector()
        c = consumer(srv.namesrv, "RestartGroup", "Restarted", got, consume_from_where=FIRST)
        await c.start()
        await produce(srv.namesrv, "Restarted", 40, prefix="before")
        await eventually(lambda: len(got.distinct()) == 40, what="before the restart", timeout=20.0)
        await c.drain()
        assert srv.stop() == 0
        await asyncio.sleep(0.5)
        srv.start()
        await produce(srv.namesrv, "Restarted", 40, prefix="after")
        await eventually(lambda: len(got.distinct()) == 80, timeout=30, what="the consumer resumes")
        await c.shutdown()
        assert not any(b.startswith(b"before") for b in got.duplicates())
    finally:
        srv.stop()
