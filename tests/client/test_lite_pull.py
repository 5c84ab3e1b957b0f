"""The lite pull consumer against a real server: subscribe or assign, poll, seek, commit."""

from __future__ import annotations

import asyncio

import pytest

from tests.consumer_support import produce
from tests.support import RawClient, ServerProcess, create_topic
from tidemq.client.consumer import ConsumeFromWhere
from tidemq.client.consumer.lite_pull import LitePullConsumer
from tidemq.client.instance import MQClientError
from tidemq.record import MessageExt

pytestmark = pytest.mark.e2e

FIRST = ConsumeFromWhere.FIRST_OFFSET


async def _poll_until(c: LitePullConsumer, count: int, timeout: float = 15.0) -> list[MessageExt]:
    out: list[MessageExt] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(out) < count and loop.time() < deadline:
        out += await c.poll(timeout=0.5)
    return out


async def test_subscribe_and_poll_with_auto_commit(server: ServerProcess) -> None:
    await create_topic(server.broker, "Lite")
    await produce(server.namesrv, "Lite", 50, tags=lambda i: "x" if i % 2 else "y")
    c = LitePullConsumer("LiteGroup", server.namesrv, consume_from_where=FIRST)
    c.subscribe("Lite", "x")
    await c.start()
    msgs = await _poll_until(c, 25)
    assert sorted(m.body for m in msgs) == sorted(f"m{i}".encode() for i in range(1, 50, 2))
    assert await c.poll(timeout=0.3) == []
    await c.shutdown()
    raw = await RawClient.open(server.broker)
    total = 0
    for q in range(4):
        resp = await raw.call(14, {"consumerGroup": "LiteGroup", "topic": "Lite", "queueId": str(q)})
        total += int(resp.ext_fields["offset"])
    raw.close()
    assert total == 50, "auto commit stores the offsets of what was polled"


async def test_assign_seek_and_manual_commit(server: ServerProcess) -> None:
    await create_topic(server.broker, "LiteSeek", 2)
    await produce(server.namesrv, "LiteSeek", 40)
    c = LitePullConsumer("SeekGroup", server.namesrv, auto_commit=False, consume_from_where=FIRST)
    await c.start()
    queues = await c.fetch_message_queues("LiteSeek")
    assert len(queues) == 2
    c.assign(queues[:1])
    msgs = await _poll_until(c, 20)
    assert len(msgs) == 20 and {m.queue_id for m in msgs} == {queues[0].queue_id}
    await c.seek(queues[0], 15)
    again = await _poll_until(c, 5)
    assert [m.queue_offset for m in again] == [15, 16, 17, 18, 19]
    with pytest.raises(MQClientError, match="outside"):
        await c.seek(queues[0], 999)
    with pytest.raises(MQClientError, match="not assigned"):
        await c.seek(queues[1], 0)
    await c.seek_to_begin(queues[0])
    assert (await _poll_until(c, 20))[0].queue_offset == 0
    await c.commit()
    raw = await RawClient.open(server.broker)
    resp = await raw.call(
        14, {"consumerGroup": "SeekGroup", "topic": "LiteSeek", "queueId": str(queues[0].queue_id)}
    )
    assert resp.ext_fields["offset"] == "20"
    raw.close()
    await c.shutdown()
