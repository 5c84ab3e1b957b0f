"""Helpers for push-consumer tests: produce a known set, collect what listeners see."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from tests.support import RawClient, eventually, unique
from tidemq.client.consumer import ConsumeContext, ConsumeFromWhere, ConsumeStatus, PushConsumer
from tidemq.client.consumer.lite_pull import LitePullConsumer
from tidemq.client.message import Message
from tidemq.client.producer import Producer
from tidemq.record import MessageExt


async def produce(
    namesrv: str,
    topic: str,
    count: int,
    *,
    prefix: str = "m",
    tags: Callable[[int], str | None] | None = None,
    sharding: Callable[[int], str] | None = None,
    start: int = 0,
) -> None:
    async with Producer(f"PG-{topic}", namesrv) as producer:
        for i in range(start, start + count):
            msg = Message(topic, f"{prefix}{i}".encode(), tags=tags(i) if tags else None)
            if sharding is not None:
                await producer.send(msg, sharding_key=sharding(i))
            else:
                await producer.send(msg)


class Collector:
    """A listener that records every delivery; ``fail`` decides which deliveries fail."""

    def __init__(
        self,
        fail: Callable[[MessageExt], bool] | None = None,
        delay: float = 0.0,
        ok: ConsumeStatus = ConsumeStatus.CONSUME_SUCCESS,
        retry: ConsumeStatus = ConsumeStatus.RECONSUME_LATER,
    ) -> None:
        self.fail = fail
        self.delay = delay
        self.ok = ok
        self.retry = retry
        self.deliveries: list[MessageExt] = []
        self.lock = threading.Lock()

    async def __call__(self, msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        if self.delay:
            await asyncio.sleep(self.delay)
        with self.lock:
            self.deliveries.extend(msgs)
        if self.fail is not None and any(self.fail(m) for m in msgs):
            return self.retry
        return self.ok

    @property
    def bodies(self) -> list[bytes]:
        return [m.body for m in self.deliveries]

    def distinct(self) -> set[bytes]:
        return set(self.bodies)

    def duplicates(self) -> dict[bytes, int]:
        return {b: n for b, n in Counter(self.bodies).items() if n > 1}


def consumer(
    namesrv: str,
    group: str,
    topic: str,
    listener: object,
    *,
    expression: str = "*",
    orderly: bool = False,
    **kwargs: object,
) -> PushConsumer:
    c = PushConsumer(group, namesrv, **kwargs)  # type: ignore[arg-type]
    c.subscribe(topic, expression)
    c.register_listener(listener, orderly=orderly)  # type: ignore[arg-type]
    return c


@asynccontextmanager
async def caught_up(
    namesrv: str, group: str, topic: str, got: Collector, count: int, timeout: float = 30.0, **kwargs: object
) -> AsyncIterator[PushConsumer]:
    """A push consumer of ``group`` from the first offset, online once ``count`` distinct messages have
    reached ``got`` and their offsets are committed (drain); shut down on leaving."""
    c = consumer(namesrv, group, topic, got, consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **kwargs)
    await c.start()
    try:
        await eventually(lambda: len(got.distinct()) >= count, what=f"{count} consumed", timeout=timeout)
        await c.drain()
        yield c
    finally:
        await c.shutdown()


async def consume_once(
    namesrv: str, group: str, topic: str, got: Collector, count: int, timeout: float = 30.0, **kwargs: object
) -> None:
    """``count`` distinct messages consumed by ``group`` from the first offset, then the consumer gone."""
    async with caught_up(namesrv, group, topic, got, count, timeout, **kwargs):
        pass


async def committed_offsets(broker: str, group: str, topic: str, queues: int) -> list[int]:
    """The group's offsets as the broker stores them (QUERY_CONSUMER_OFFSET), -1 where none is stored."""
    raw = await RawClient.open(broker)
    try:
        out = []
        for q in range(queues):
            resp = await raw.call(14, {"consumerGroup": group, "topic": topic, "queueId": str(q)})
            out.append(int(resp.ext_fields["offset"]) if resp.code == 0 else -1)
        return out
    finally:
        raw.close()


async def max_offsets(broker: str, topic: str, queues: int) -> list[int]:
    """Each queue's max offset (GET_MAX_OFFSET): the offset a fully consumed queue has committed."""
    raw = await RawClient.open(broker)
    try:
        answers = [await raw.call(30, {"topic": topic, "queueId": str(q)}) for q in range(queues)]
        return [int(a.ext_fields["offset"]) for a in answers]
    finally:
        raw.close()


async def property_rules_scenario(namesrv: str, topic: str, group: str) -> tuple[list[MessageExt], str]:
    """Send a plain, a delayed and a batch of two messages to ``topic`` (one queue, created already);
    fail the plain one until it lands in the dead-letter queue (max reconsume times 1). Returns every
    delivery in order and the topic of the group's dead letters."""
    async with Producer(f"PG-{topic}", namesrv) as producer:
        await producer.send(Message(topic, b"plain", tags="p", keys="k-plain"))
        await producer.send(Message(topic, b"delayed", delay_level=1))
        await producer.send_batch([Message(topic, b"b%d" % i, tags="b") for i in range(2)])
    got = Collector(fail=lambda m: m.body == b"plain")
    c = consumer(
        namesrv,
        group,
        topic,
        got,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        max_reconsume_times=1,
    )
    await c.start()
    try:
        await eventually(
            lambda: got.bodies.count(b"plain") == 2 and len(got.distinct()) == 4,
            timeout=60,
            what="the plain message twice and the others once",
        )
    finally:
        await c.shutdown()
    return got.deliveries, f"%DLQ%{group}"


def check_property_rules(
    deliveries: list[MessageExt], dead: list[MessageExt], topic: str, group: str, plain_keeps_wait: bool
) -> None:
    """The properties a Java broker stores (observed on Apache RocketMQ 4.9.7 and 5.3.3): a delivery from
    the schedule queue keeps DELAY and WAIT; a retry carries WAIT=false, its DELAY level and the first
    copy's offset message id; a dead letter DELAY=0. A plain send loses WAIT on 4.9, keeps it on 5.x."""
    first, retried = (m for m in deliveries if m.body == b"plain")
    assert (first.reconsume_times, retried.reconsume_times) == (0, 1)
    assert ("WAIT" in first.properties) == plain_keeps_wait, first.properties
    delayed = next(m for m in deliveries if m.body == b"delayed")
    assert delayed.properties["DELAY"] == "1" and delayed.properties["WAIT"] == "true"
    assert (delayed.properties["REAL_TOPIC"], delayed.properties["REAL_QID"]) == (topic, "0")
    assert all(m.properties["WAIT"] == "true" for m in deliveries if m.body.startswith(b"b"))
    props = retried.properties
    assert (props["DELAY"], props["WAIT"], props["RETRY_TOPIC"]) == ("3", "false", topic), props
    assert props["REAL_TOPIC"] == f"%RETRY%{group}"
    assert props["ORIGIN_MESSAGE_ID"] == first.offset_msg_id
    (letter,) = dead
    assert letter.body == b"plain" and letter.reconsume_times == 2
    assert (letter.properties["DELAY"], letter.properties["WAIT"]) == ("0", "false"), letter.properties
    assert letter.properties["ORIGIN_MESSAGE_ID"] == first.offset_msg_id


async def drain(
    namesrv: str,
    topic: str,
    expect: int,
    timeout: float = 30.0,
    *,
    distinct: Callable[[MessageExt], object] | None = None,
) -> list[MessageExt]:
    """Every message of ``topic`` from the first offset, through tidemq's lite pull consumer, once
    ``expect`` have arrived (and a moment more, to catch extras). With ``distinct``, ``expect`` counts
    messages of different ``distinct(message)``: an at-least-once writer's duplicates do not end it early."""
    c = LitePullConsumer(unique("drain"), namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    c.subscribe(topic)
    await c.start()
    got: list[MessageExt] = []

    def arrived() -> int:
        return len(got) if distinct is None else len({distinct(m) for m in got})

    try:
        deadline = time.monotonic() + timeout
        while arrived() < expect and time.monotonic() < deadline:
            got += await c.poll(1.0)
        got += await c.poll(0.5)
    finally:
        await c.shutdown()
    return got
