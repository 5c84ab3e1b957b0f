"""Graceful shutdown of the push consumer against a real ``tidemq server``: what a listener finished while
the consumer was shutting down is committed, so the group's next consumer does not get it again."""

from __future__ import annotations

import asyncio

import pytest

from tests.consumer_support import Collector, committed_offsets, consumer, produce
from tests.support import ServerProcess, create_topic, eventually, unique
from tidemq.client.consumer import ConsumeContext, ConsumeFromWhere, ConsumeStatus
from tidemq.record import MessageExt

pytestmark = pytest.mark.e2e

FIRST = ConsumeFromWhere.FIRST_OFFSET
COUNT = 40


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrent", "orderly"])
async def test_work_finished_during_shutdown_is_committed(server: ServerProcess, orderly: bool) -> None:
    topic, group = unique("Shutdown"), unique("ShutdownGroup")
    ok = ConsumeStatus.SUCCESS if orderly else ConsumeStatus.CONSUME_SUCCESS
    finished: list[MessageExt] = []

    async def slow(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        await asyncio.sleep(0.2)
        finished.extend(msgs)
        return ok

    await create_topic(server.broker, topic, 4)
    await produce(server.namesrv, topic, COUNT)
    first = consumer(
        server.namesrv,
        group,
        topic,
        slow,
        orderly=orderly,
        consume_from_where=FIRST,
        consume_thread_max=10,
        await_termination_s=30.0,
    )
    await first.start()
    try:
        await eventually(lambda: len(finished) >= 4, what="the first listeners to finish", timeout=20.0)
    finally:
        await first.shutdown()  # other listeners are mid-way: they finish during the shutdown
    committed = await committed_offsets(server.broker, group, topic, 4)
    redelivered = [m.body for m in finished if m.queue_offset >= committed[m.queue_id]]
    assert redelivered == [], f"finished but not committed: {redelivered} (offsets {committed})"

    # The group's next consumer, end to end: late messages behind the first one's work in every queue.
    await produce(server.namesrv, topic, 8, prefix="late")
    done_by_first = {m.body for m in finished}
    everything = {f"m{i}".encode() for i in range(COUNT)} | {f"late{i}".encode() for i in range(8)}
    again = Collector(ok=ok)
    second = consumer(server.namesrv, group, topic, again, orderly=orderly, consume_from_where=FIRST)
    await second.start()
    try:
        await eventually(
            lambda: done_by_first | again.distinct() == everything,
            what="every message consumed",
            timeout=20.0,
        )
        await second.drain()
    finally:
        await second.shutdown()
    assert again.distinct() & done_by_first == set(), "finished work was delivered again"
