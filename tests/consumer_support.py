"""Helpers for push-consumer tests: produce a known set, collect what listeners see."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable

from tests.support import RawClient
from tidemq.client.consumer import ConsumeContext, ConsumeStatus, PushConsumer
from tidemq.client.message import Message
from tidemq.client.producer import Producer
from tidemq.remoting.message import MessageExt


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


async def create_topic(broker: str, topic: str, queues: int = 4) -> None:
    c = await RawClient.open(broker)
    await c.create_topic(topic, queues)
    c.close()


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


async def wait_until(predicate: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


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
