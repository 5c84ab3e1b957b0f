"""SIGKILL rounds under sync-flush load: producers on RocketMQ remoting (tidemq's Producer), NSQ TCP (tidemq's
NSQ producer) and gRPC (the official 5.x Python SDK in a subprocess) record what was acknowledged while the
server is SIGKILLed at a random moment each round and restarted on the same data dir. At the end everything
is consumed: no acknowledged message may be missing (duplicates from retried unacknowledged sends are
counted, not failed)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from tests.chaos.chaos_support import ChaosServer, SdkProducer, Tally, judge, rounds
from tests.nsq_support import RawNsq
from tests.support import RawClient
from tidemq.client.message import Message, SendStatus
from tidemq.client.producer import Producer
from tidemq.nsq.client.producer import Producer as NsqProducer

ROUNDS = rounds(short=4)
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120 + ROUNDS * 20)]

QUEUES = 4


async def rocketmq_load(
    namesrv: str, topic: str, tally: Tally, stop: asyncio.Event, prefix: str = "r"
) -> None:
    producer = Producer(f"PG-{topic}", namesrv, send_timeout=3.0)
    await producer.start()
    n = 0
    try:
        while not stop.is_set():
            body = f"{prefix}-{n}"
            n += 1
            try:
                result = await producer.send(Message(topic, body.encode()))
            except Exception:
                tally.failed += 1
                await asyncio.sleep(0.1)
                continue
            if result.status == SendStatus.SEND_OK:
                tally.acknowledged.add(body)
    finally:
        await producer.shutdown()


async def nsq_load(addr: str, topic: str, tally: Tally, stop: asyncio.Event) -> None:
    producer = NsqProducer(addr)
    n = 0
    while not stop.is_set():
        body = f"n-{n}"
        n += 1
        try:
            await asyncio.wait_for(producer.publish(topic, body.encode()), 5.0)
        except Exception:
            tally.failed += 1
            await asyncio.sleep(0.1)
            continue
        tally.acknowledged.add(body)
    await producer.stop()


async def rocketmq_bodies(broker: str, topic: str) -> list[str]:
    client = await RawClient.open(broker)
    try:
        out: list[str] = []
        for queue in range(QUEUES):
            out += [m.body.decode() for m in await client.drain(topic, queue, max_pulls=200_000)]
        return out
    finally:
        client.close()


async def nsq_bodies(addr: str, topic: str, channel: str) -> list[str]:
    nsq = await RawNsq.open(addr)
    try:
        await nsq.sub(topic, channel, rdy=2000)
        return [b.decode() for b in await nsq.drain(quiet=3.0, limit=10_000_000)]
    finally:
        nsq.close()


async def test_sigkill_rounds_under_sync_flush_load_lose_no_acknowledged_message(tmp_path: Path) -> None:
    server = await ChaosServer(tmp_path / "data", "--flush", "sync").start()
    tallies = {p: Tally(p) for p in ("remoting", "nsq", "grpc")}
    stop = asyncio.Event()
    sdk: SdkProducer | None = None
    try:
        admin = await RawClient.open(server.proc.broker)
        for topic in ("ChaosR", "ChaosG"):
            await admin.create_topic(topic, QUEUES)
        admin.close()
        nsq = await RawNsq.open(server.proc.nsqd)
        await nsq.sub("chaos_n", "verify")  # the channel exists before the first PUB, so it gets them all
        nsq.close()
        loads = [
            asyncio.create_task(rocketmq_load(server.proc.namesrv, "ChaosR", tallies["remoting"], stop)),
            asyncio.create_task(nsq_load(server.proc.nsqd, "chaos_n", tallies["nsq"], stop)),
        ]
        sdk = SdkProducer(server.proc.grpc, "ChaosG", "g", tmp_path / "stop", tallies["grpc"])
        rng = random.Random()
        for _ in range(ROUNDS):
            await asyncio.sleep(rng.uniform(1.0, 3.0))
            await server.sigkill_and_restart()
        await asyncio.sleep(2.0)  # every client back on the last incarnation
        stop.set()
        await asyncio.gather(*loads)
        await asyncio.to_thread(sdk.finish)
        consumed = {
            "remoting": await rocketmq_bodies(server.proc.broker, "ChaosR"),
            "nsq": await nsq_bodies(server.proc.nsqd, "chaos_n", "verify"),
            "grpc": await rocketmq_bodies(server.proc.broker, "ChaosG"),
        }
    finally:
        stop.set()
        if sdk is not None:
            await asyncio.to_thread(sdk.finish)
        await server.stop()
    judge(
        tallies,
        consumed,
        lambda protocol: f"SIGKILL x{ROUNDS}, sync flush, {protocol} producer",
        server.peak_rss_mb,
    )
