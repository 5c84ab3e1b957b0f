"""Kills during consumption: a push consumer (remoting), an NSQ consumer and a gRPC SimpleConsumer (the
official 5.x Python SDK in a subprocess) consume while producers send with sync flush and the server is
SIGKILLed and restarted on the same data dir: every acknowledged message is eventually consumed
(at-least-once)."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.chaos.chaos_support import HERE, ChaosServer, Tally, judge, rounds
from tests.chaos.test_kill_produce import QUEUES, nsq_load, rocketmq_load
from tests.consumer_support import Collector, consumer
from tests.nsq_support import RawNsq
from tests.support import RawClient
from tidemq.client.consumer import ConsumeFromWhere
from tidemq.nsq.client.consumer import Consumer as NsqConsumer
from tidemq.nsq.client.message import Message as NsqMessage

ROUNDS = rounds(short=3)
QUIET_S = 20.0
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300 + ROUNDS * 30)]


class SdkConsumer:
    """The SDK's SimpleConsumer in a subprocess; a reader thread collects the bodies it prints."""

    def __init__(self, endpoint: str, group: str, topic: str, stop_file: Path) -> None:
        self.stop_file = stop_file
        self.bodies: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "sdk_load_consumer.py"), endpoint, group, topic, str(stop_file)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.bodies.append(json.loads(line)["body"])

    def finish(self, timeout: float = 30.0) -> None:
        self.stop_file.touch()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(10)


async def test_sigkill_rounds_during_consumption_every_acknowledged_message_is_consumed(
    tmp_path: Path,
) -> None:
    server = await ChaosServer(tmp_path / "data", "--flush", "sync").start()
    tallies = {p: Tally(p) for p in ("remoting push", "nsq", "grpc simple")}
    stop = asyncio.Event()
    nsq_bodies: list[str] = []

    async def on_nsq(message: NsqMessage) -> None:
        nsq_bodies.append(message.body.decode())

    push_listener = Collector()
    push = consumer(
        server.proc.namesrv,
        "ChaosCG",
        "ChaosPush",
        push_listener,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
    )
    # max_attempts=0: a message redelivered after each kill is never given up on; reconnect within 0.5 s.
    nsq_consumer = NsqConsumer(
        "chaos_c", "consume", max_attempts=0, lookupd_poll_interval=0.5, max_in_flight=64
    )
    nsq_consumer.add_handler(on_nsq)
    sdk: SdkConsumer | None = None
    try:
        admin = await RawClient.open(server.proc.broker)
        for topic in ("ChaosPush", "ChaosSimple"):
            await admin.create_topic(topic, QUEUES)
        admin.close()
        nsq = await RawNsq.open(server.proc.nsqd)
        await nsq.sub("chaos_c", "consume")
        nsq.close()
        await push.start()
        await nsq_consumer.connect_to_nsqd(server.proc.nsqd)
        sdk = SdkConsumer(server.proc.grpc, "ChaosSG", "ChaosSimple", tmp_path / "stop")
        namesrv = server.proc.namesrv
        loads = [
            asyncio.create_task(rocketmq_load(namesrv, "ChaosPush", tallies["remoting push"], stop, "p")),
            asyncio.create_task(rocketmq_load(namesrv, "ChaosSimple", tallies["grpc simple"], stop, "s")),
            asyncio.create_task(nsq_load(server.proc.nsqd, "chaos_c", tallies["nsq"], stop)),
        ]
        rng = random.Random()
        for _ in range(ROUNDS):
            await asyncio.sleep(rng.uniform(1.0, 3.0))
            await server.sigkill_and_restart()
        await asyncio.sleep(1.0)
        stop.set()
        await asyncio.gather(*loads)
        consumed = {
            "remoting push": lambda: [b.decode() for b in push_listener.bodies],
            "nsq": lambda: list(nsq_bodies),
            "grpc simple": lambda: list(sdk.bodies) if sdk else [],
        }

        def all_consumed() -> bool:
            return all(not tallies[p].acknowledged - set(got()) for p, got in consumed.items())

        # A consumer far behind (the SDK acks one message per call) is waited for as long as it makes
        # progress; one that stops short for QUIET_S has lost messages (reported below, protocol by protocol).
        seen, quiet_since = -1, time.monotonic()
        while not all_consumed() and time.monotonic() - quiet_since < QUIET_S:
            now = sum(len(got()) for got in consumed.values())
            if now != seen:
                seen, quiet_since = now, time.monotonic()
            await asyncio.sleep(0.5)
        snapshot = {p: got() for p, got in consumed.items()}
    finally:
        stop.set()
        if sdk is not None:
            await asyncio.to_thread(sdk.finish)
        await push.shutdown()
        await nsq_consumer.stop()
        await server.stop()
    judge(
        tallies,
        snapshot,
        lambda protocol: f"SIGKILL x{ROUNDS} during consumption, {protocol} consumer",
        server.peak_rss_mb,
    )
