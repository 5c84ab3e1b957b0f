"""Timer messages end to end: delivery at (never before) an exact time, the maximum delay, SIGKILL.

"Not early" is asserted strictly: a delivered copy's store timestamp (the broker's clock, the same
clock the due time is checked against, since client and server share this machine) is at or after its
TIMER_DELIVER_MS, with a tolerance of 0 ms. "Delivered" is asserted with a generous bound only.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.support import RawClient, ServerProcess, create_topic, eventually, unique
from tidemq.client import api
from tidemq.client.instance import MQClientError
from tidemq.client.message import Message
from tidemq.client.producer import Producer
from tidemq.record import BatchItem, MessageExt, Prop, encode_batch
from tidemq.remoting.codes import RequestCode, ResponseCode

pytestmark = pytest.mark.e2e


def _now_ms() -> int:
    return int(time.time() * 1000)


async def _delivered(raw: RawClient, topic: str, expect: int, timeout: float = 60.0) -> list[MessageExt]:
    """Queue 0 of ``topic`` once it holds ``expect`` messages (a moment more, to catch extras)."""
    got: list[MessageExt] = []

    async def enough() -> bool:
        nonlocal got
        got = await raw.drain(topic, 0)
        return len(got) >= expect

    await eventually(enough, timeout, f"{expect} timer messages delivered to {topic}", interval=0.2)
    await asyncio.sleep(0.5)
    return await raw.drain(topic, 0)


def _assert_not_early(msgs: list[MessageExt]) -> None:
    for m in msgs:
        due = int(m.properties[Prop.TIMER_DELIVER_MS])
        assert m.store_timestamp >= due, (m.body, m.store_timestamp - due)


async def test_timer_messages_arrive_at_their_time_not_before(server: ServerProcess) -> None:
    topic = unique("timer")
    await create_topic(server.broker, topic, 1, routed_by=server.namesrv)
    raw = await RawClient.open(server.broker)
    async with Producer(unique("tpg"), server.namesrv) as producer:
        start = _now_ms()
        await producer.send(Message(topic, b"at-1s"), deliver_at=start + 1000)
        await producer.send(Message(topic, b"in-2s"), delay=timedelta(seconds=2))
        await producer.send(Message(topic, b"at-3s", deliver_at=datetime.now() + timedelta(seconds=3)))
        await producer.send(Message(topic, b"past"), deliver_at=start - 60_000)
    try:
        # Only the one due in the past is visible before the first timer's time.
        early = await raw.drain(topic, 0)
        if _now_ms() < start + 1000:
            assert [m.body for m in early] == [b"past"]
        msgs = await _delivered(raw, topic, 4)
        assert sorted(m.body for m in msgs) == [b"at-1s", b"at-3s", b"in-2s", b"past"]
        _assert_not_early(msgs)
        timed = {m.body: m for m in msgs if m.body != b"past"}
        assert [m.body for m in sorted(timed.values(), key=lambda m: m.queue_offset)] == [
            b"at-1s",
            b"in-2s",
            b"at-3s",
        ]
        for m in timed.values():
            assert Prop.REAL_TOPIC not in m.properties and Prop.REAL_QID not in m.properties
            assert m.properties[Prop.TIMER_OUT_MS] == m.properties[Prop.TIMER_DELIVER_MS]
            assert Prop.TIMER_DEQUEUE_MS in m.properties
    finally:
        raw.close()


async def test_a_timer_beyond_the_maximum_delay_or_not_a_number_is_refused(server: ServerProcess) -> None:
    topic = unique("timer-bad")
    await create_topic(server.broker, topic, 1, routed_by=server.namesrv)
    async with Producer(unique("tpg"), server.namesrv) as producer:
        with pytest.raises(api.BrokerError) as refused:
            await producer.send(Message(topic, b"late"), delay=timedelta(days=3, minutes=1))
    assert refused.value.code == ResponseCode.MESSAGE_ILLEGAL
    assert "timer message illegal" in str(refused.value)
    raw = await RawClient.open(server.broker)
    try:
        sent = await raw.send(topic, b"x", props={Prop.TIMER_DELIVER_MS: "soon"})
        assert sent.code == ResponseCode.MESSAGE_ILLEGAL and "TIMER_DELIVER_MS" in (sent.remark or "")
        sent = await raw.send(topic, b"y", props={Prop.TIMER_DELAY_SEC: str(3 * 86_400 + 60)})
        assert sent.code == ResponseCode.MESSAGE_ILLEGAL
        assert await raw.drain(topic, 0) == []
    finally:
        raw.close()


async def test_after_sigkill_every_pending_timer_is_delivered_once_and_none_early(tmp_path: Path) -> None:
    data = tmp_path / "data"
    topic = unique("timer-kill")
    first = ServerProcess(data).start()
    try:
        await create_topic(first.broker, topic, 1)
        raw = await RawClient.open(first.broker)
        start = _now_ms()
        for i in range(30):
            # Ten due before the kill, twenty after it (the restart takes a second or two).
            due = start + (1000 if i < 10 else 4000 + 50 * i)
            sent = await raw.send(topic, f"m{i}".encode(), props={Prop.TIMER_DELIVER_MS: str(due)})
            assert sent.code == ResponseCode.SUCCESS, sent.remark
        assert await raw.drain(topic, 0) == []
        await _delivered(raw, topic, 10)
        raw.close()
    finally:
        first.kill()
    second = ServerProcess(data).start()
    try:
        raw = await RawClient.open(second.broker)
        msgs = await _delivered(raw, topic, 30)
        assert sorted(m.body for m in msgs) == sorted(f"m{i}".encode() for i in range(30))
        _assert_not_early(msgs)
        raw.close()
    finally:
        second.stop()


async def test_a_cancellation_marker_stops_its_timer_message_across_a_sigkill(tmp_path: Path) -> None:
    """Java's delete marker: TIMER_DEL_UNIQKEY "<topic>+<uniq key>" and the same deliver time."""
    data = tmp_path / "data"
    topic = unique("timer-cancel")
    first = ServerProcess(data).start()
    try:
        await create_topic(first.broker, topic, 1)
        raw = await RawClient.open(first.broker)
        due = str(_now_ms() + 4000)
        for key in ("CANCEL-ME", "KEEP-ME", "CANCEL-BARE"):
            props = {Prop.TIMER_DELIVER_MS: due, Prop.UNIQ_KEY: key}
            assert (await raw.send(topic, key.encode(), props=props)).code == ResponseCode.SUCCESS
        for marker in (f"{topic}+CANCEL-ME", "CANCEL-BARE"):
            props = {Prop.TIMER_DELIVER_MS: due, Prop.TIMER_DEL_UNIQKEY: marker}
            sent = await raw.send(topic, b"", props=props)
            assert sent.code == ResponseCode.SUCCESS, sent.remark
        past = {Prop.TIMER_DELIVER_MS: str(_now_ms() - 1000), Prop.TIMER_DEL_UNIQKEY: f"{topic}+KEEP-ME"}
        refused = await raw.send(topic, b"", props=past)
        assert refused.code == ResponseCode.MESSAGE_ILLEGAL and "TIMER_DEL_UNIQKEY" in (refused.remark or "")
        raw.close()
    finally:
        first.kill()
    second = ServerProcess(data).start()
    try:
        raw = await RawClient.open(second.broker)
        msgs = await _delivered(raw, topic, 1)
        await asyncio.sleep(max(0.0, (int(due) - _now_ms()) / 1000) + 1.5)
        assert [m.body for m in await raw.drain(topic, 0)] == [b"KEEP-ME"]
        assert [m.body for m in msgs] == [b"KEEP-ME"]
        raw.close()
    finally:
        second.stop()


async def test_batch_messages_cannot_be_timer_messages(server: ServerProcess) -> None:
    topic = unique("timer-batch")
    await create_topic(server.broker, topic, 1, routed_by=server.namesrv)
    async with Producer(unique("tpg"), server.namesrv) as producer:
        with pytest.raises(MQClientError, match="timer"):
            await producer.send_batch(
                [Message(topic, b"a"), Message(topic, b"b", delay=timedelta(seconds=5))]
            )
    raw = await RawClient.open(server.broker)
    try:
        body = encode_batch([BatchItem(0, b"a", "")])
        sent = await raw.send(
            topic, body, props={Prop.TIMER_DELAY_SEC: "5"}, code=RequestCode.SEND_BATCH_MESSAGE
        )
        assert sent.code == ResponseCode.MESSAGE_ILLEGAL and "TIMER_DELAY_SEC" in (sent.remark or "")
        assert await raw.drain(topic, 0) == []
    finally:
        raw.close()
