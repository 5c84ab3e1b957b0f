"""The scale ladder's client child processes: idle producers that stay connected and heartbeating, and
push consumers one per consumer group.

They run in their own processes (``multiprocessing`` spawn) because hundreds of client instances in the
driver's process would make the driver's one event loop the bottleneck of the load it measures. Each child
answers on a queue: ``("ready", n)`` once its clients are up, then ``("counts", {...})`` or
``("error", text)``; it exits when the driver sets ``stop`` or after ``cap`` seconds, whichever is first.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from multiprocessing.synchronize import Event
from typing import Any

from tidemq.client.consumer import ConsumeContext, ConsumeFromWhere, ConsumeStatus, PushConsumer
from tidemq.client.message import Message
from tidemq.client.producer import Producer
from tidemq.record import MessageExt

QUEUES = 4
CONNECT_CONCURRENCY = 32
SHUTDOWN_TIMEOUT = 20.0


async def _until(stop: Event, cap: float) -> None:
    deadline = time.monotonic() + cap
    while not stop.is_set() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)


async def _idle_producers(
    namesrv: str, topic: str, first: int, count: int, cap: float, out: Any, stop: Event
) -> None:
    gate = asyncio.Semaphore(CONNECT_CONCURRENCY)
    producers = [Producer(f"SCALE_IDLE_{first + i}", namesrv) for i in range(count)]

    async def connect(p: Producer) -> None:
        # One send routes the topic and connects to the broker, so the instance heartbeats to it from then on.
        async with gate:
            await p.start()
            await p.send(Message(topic, b"hello"))

    try:
        await asyncio.gather(*(connect(p) for p in producers))
        out.put(("ready", count))
        await _until(stop, cap)
    finally:
        for p in producers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(p.shutdown(), SHUTDOWN_TIMEOUT)


def idle_producers(
    namesrv: str, topic: str, first: int, count: int, cap: float, out: Any, stop: Event
) -> None:
    """``count`` producers, each its own client instance (connection and heartbeat) to the broker."""
    try:
        asyncio.run(_idle_producers(namesrv, topic, first, count, cap, out, stop))
    except Exception as exc:  # the driver prints it and marks the rung failed
        out.put(("error", f"{type(exc).__name__}: {exc}"))


async def _group_consumers(
    namesrv: str, topic: str, groups: list[str], cap: float, out: Any, stop: Event, count_now: Event
) -> None:
    counts: Counter[str] = Counter()
    consumers: list[PushConsumer] = []
    for group in groups:
        consumer = PushConsumer(
            group, namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET, await_termination_s=5.0
        )

        def listener_for(g: str) -> Any:
            async def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
                counts[g] += len(msgs)
                return ConsumeStatus.CONSUME_SUCCESS

            return listener

        consumer.register_listener(listener_for(group))
        consumer.subscribe(topic, "*")
        consumers.append(consumer)
    try:
        for consumer in consumers:
            await consumer.start()

        def owned(c: PushConsumer) -> int:
            return len([mq for mq in c.rebalancer.process_queues if mq.topic == topic])

        deadline = time.monotonic() + min(cap, 60.0)
        while any(owned(c) < QUEUES for c in consumers) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        out.put(("ready", sum(1 for c in consumers if owned(c) >= QUEUES)))
        end = time.monotonic() + cap
        while not count_now.is_set() and not stop.is_set() and time.monotonic() < end:
            await asyncio.sleep(0.05)
        out.put(("counts", dict(counts)))
        await _until(stop, 10.0)
    finally:
        for consumer in consumers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(consumer.shutdown(), SHUTDOWN_TIMEOUT)


def group_consumers(
    namesrv: str, topic: str, groups: list[str], cap: float, out: Any, stop: Event, count_now: Event
) -> None:
    """One push consumer per group in ``groups``, all on ``topic`` from the first offset; counts what
    each group was delivered until ``count_now`` is set."""
    try:
        asyncio.run(_group_consumers(namesrv, topic, groups, cap, out, stop, count_now))
    except Exception as exc:
        out.put(("error", f"{type(exc).__name__}: {exc}"))
