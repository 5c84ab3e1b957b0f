"""tidemq's RocketMQ side: ``tidemq server --flush async|sync`` (``bench_common.Server``), tidemq's Python
client.

Producers: ``Producer.send_batch`` (``spec.batch`` messages per request, ``spec.window`` requests in
flight) or, with ``spec.batch`` 1, ``Producer.send_async`` with at most ``spec.window`` sends in flight.
With ``spec.options["client"] == "go"`` W1's producer is rocketmq-client-go instead (``_produce_go``).
Consumers (clustering, from the first offset, one consumer owning all queues): ``PushConsumer`` with a
no-op coroutine listener, or ``LitePullConsumer`` ``poll()`` + ``commit()`` every ``COMMIT_EVERY``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

from clientlib import SETTLE_SECONDS, Flow, Spec, Tally, pump, ready
from procs import Broker

from bench_common import Server, wait_until
from tidemq.client.admin import Admin
from tidemq.client.consumer import ConsumeContext, ConsumeFromWhere, ConsumeStatus, PushConsumer
from tidemq.client.consumer.lite_pull import LitePullConsumer
from tidemq.client.message import Message, SendResult
from tidemq.client.producer import Producer
from tidemq.record import MessageExt

QUEUES = 4
PULL_BATCH = 32
COMMIT_EVERY = 1000
READY_TIMEOUT = 20.0
ROUTE_TIMEOUT = 30.0
#: ``make rocketmq-go-bench``: interop/rocketmq-go built on its own (the tests' binary is left alone).
GO_PEER = Path(__file__).resolve().parents[2] / ".cache" / "rocketmq-go-bench" / "peer"
SHUTDOWN_TIMEOUT = 20.0


class TidemqBroker(Broker):
    """``bench_common.Server`` (``tidemq server``, RocketMQ side only) behind the ``Broker`` interface."""

    system = "tidemq"

    def __init__(self, flush: str) -> None:
        super().__init__(f"tidemq {flush}")
        self.durability = flush
        self.server = self.make_server(flush)

    def make_server(self, flush: str) -> Server:
        return Server(flush)

    def start(self) -> None:
        self.server.start()

    def roots(self) -> list[int]:
        return [self.server.pid] if self.server.alive() else []

    def alive(self) -> bool:
        return self.server.alive()

    def stop(self, timeout: float = 20.0) -> None:
        self.server.stop(timeout)

    def log_tail(self, chars: int = 2000) -> str:
        return self.server.log_tail(chars)

    def cleanup(self) -> None:
        self.server.cleanup()
        super().cleanup()

    def target(self) -> dict[str, Any]:
        return {"namesrv": self.server.namesrv}

    def settings(self) -> str:
        return (
            f"{self.label}: `tidemq server --flush {self.server.flush} --no-nsq --no-lookupd` (one process: "
            f"name server + broker), {QUEUES} queues per topic; tidemq Python client: send_batch or "
            f"send_async windows (see variant; auto_batch: Producer(auto_batch=True) with Java 5.x's "
            f"defaults), PushConsumer (no-op coroutine listener, pull batch 32) or "
            f"LitePullConsumer (pull batch {PULL_BATCH}, poll + commit every {COMMIT_EVERY:,}), "
            f"clustering, from the first offset"
        )


async def _create_topic(spec: Spec) -> None:
    """Create it and wait (bounded) until the name server routes it: a Java broker registers a new topic
    with its name server a moment after answering the create."""
    async with Admin(spec.target["namesrv"]) as admin:
        await admin.create_topic(spec.name, QUEUES)

        async def routed() -> bool:
            try:
                return bool((await admin.route(spec.name)).brokers)
            except Exception:
                return False

        deadline = time.monotonic() + ROUTE_TIMEOUT
        while not await routed():
            if time.monotonic() >= deadline:
                raise RuntimeError(f"{spec.name} has no route after {ROUTE_TIMEOUT:.0f} s")
            await asyncio.sleep(0.2)


async def _produce(spec: Spec) -> dict[str, Any]:
    await _create_topic(spec)
    topic = spec.name
    options = {"auto_batch": True} if spec.options.get("auto_batch") else {}  # base clients lack it
    async with Producer(f"PG_{topic}", spec.target["namesrv"], **options) as producer:
        for mq in await producer.queues_for(topic):  # route and connection, outside the timing
            await producer.instance.broker_connection(mq.broker_name)
        flow = Flow(spec.window)

        def settle_one(_result: SendResult | None, error: BaseException | None) -> None:
            flow.settle(1, error)

        def send(n: int, bodies: list[bytes]) -> None:
            if spec.batch > 1:
                task = asyncio.ensure_future(producer.send_batch([Message(topic, b) for b in bodies]))
                task.add_done_callback(flow.settle_future(n))
            else:  # as a RocketMQ user sends asynchronously: with a send callback (Java's SendCallback)
                producer.send_async(Message(topic, bodies[0]), settle_one)

        await pump(spec, send, flow)
    return flow.result()


def _produce_go(spec: Spec) -> dict[str, Any]:
    """W1 with rocketmq-client-go v2.1.2 (``GO_PEER bench``: SendAsync, ``spec.window`` unanswered):
    the same messages from a compiled client, to tell the broker's limit from the Python client's."""
    asyncio.run(_create_topic(spec))
    args = [
        str(GO_PEER), "bench", "--namesrv", spec.target["namesrv"], "--topic", spec.name,
        "--group", f"PG_{spec.name}", "--count", str(spec.count), "--window", str(spec.window),
        "--cap", str(spec.cap), "--timeout", str(spec.cap + SETTLE_SECONDS),
    ]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=spec.cap + 2 * SETTLE_SECONDS)
    answers = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not answers:
        raise RuntimeError(f"Go producer exited with {done.returncode}: {(done.stdout + done.stderr)[-800:]}")
    result: dict[str, Any] = json.loads(answers[-1])
    return result


def produce(spec: Spec) -> dict[str, Any]:
    if spec.options.get("client") == "go":
        return _produce_go(spec)
    return asyncio.run(_produce(spec))


async def _until_assigned(consumer: PushConsumer | LitePullConsumer, topic: str) -> None:
    def assigned() -> bool:
        return len([mq for mq in consumer.rebalancer.process_queues if mq.topic == topic]) >= QUEUES

    if not await wait_until(assigned, READY_TIMEOUT):
        raise RuntimeError(f"consumer does not own all {QUEUES} queues of {topic} after {READY_TIMEOUT} s")


async def _consume(spec: Spec, tally: Tally) -> None:
    await _create_topic(spec)
    namesrv, first = spec.target["namesrv"], ConsumeFromWhere.FIRST_OFFSET
    consumer: PushConsumer | LitePullConsumer
    if spec.variant == "lite":
        consumer = LitePullConsumer(
            spec.group, namesrv, auto_commit=False, pull_batch_size=PULL_BATCH, consume_from_where=first
        )
    else:
        consumer = PushConsumer(spec.group, namesrv, consume_from_where=first, await_termination_s=5.0)

        async def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
            for msg in msgs:
                tally.record(msg.body)
            return ConsumeStatus.CONSUME_SUCCESS

        consumer.register_listener(listener)
    consumer.subscribe(spec.name, "*")
    await consumer.start()
    try:
        await _until_assigned(consumer, spec.name)
        ready()
        if isinstance(consumer, LitePullConsumer):
            polled = 0
            while not tally.done():
                for msg in await consumer.poll(timeout=tally.remaining(0.2)):
                    tally.record(msg.body)
                    polled += 1
                if polled >= COMMIT_EVERY:
                    await consumer.commit()
                    polled = 0
            await consumer.commit()
        else:
            await tally.wait()
        tally.finish()
    finally:
        await asyncio.wait_for(consumer.shutdown(), SHUTDOWN_TIMEOUT)


def consume(spec: Spec, tally: Tally) -> None:
    asyncio.run(_consume(spec, tally))
