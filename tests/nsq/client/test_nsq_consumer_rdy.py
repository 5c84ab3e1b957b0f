"""RDY distribution and backoff of the NSQ Consumer across several real ``tidemq nsqd`` processes."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from tests.nsq_support import LookupdProcess, publish
from tests.support import ServerProcess, eventually
from tidemq.nsq.client import Consumer, Message

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, lookupd: LookupdProcess
) -> Iterator[list[ServerProcess]]:
    """Three nsqd processes, each registering with one lookupd."""
    with ExitStack() as stack:
        procs = []
        for i in range(3):
            proc = ServerProcess(
                tmp_path_factory.mktemp(f"rdy{i}") / "d",
                "--msg-timeout",
                "5000",
                "--lookupd-tcp-address",
                lookupd.tcp,
                command="nsqd",
            )
            procs.append(proc.start())
            stack.callback(proc.stop)
        yield procs


class Watch:
    """Samples the consumer's RDY per connection and the handlers' unanswered messages, every few ms."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.states: list[tuple[float, tuple[int, ...]]] = []
        self.peak_total_rdy = 0
        self.held = 0
        self.peak_held = 0
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            rdys = tuple(c.rdy for c in self.consumer.connections())
            if not self.states or self.states[-1][1] != rdys:
                self.states.append((time.monotonic(), rdys))
            self.peak_total_rdy = max(self.peak_total_rdy, sum(rdys))
            await asyncio.sleep(0.005)

    def enter(self) -> None:
        self.held += 1
        self.peak_held = max(self.peak_held, self.held)

    def leave(self) -> None:
        self.held -= 1

    def stop(self) -> None:
        self._task.cancel()


async def test_max_in_flight_1_rotates_over_three_nsqd(cluster: list[ServerProcess]) -> None:
    by_nsqd: Counter[str] = Counter()
    consumer = Consumer(
        "rot1",
        "ch",
        max_in_flight=1,
        rdy_redistribute_interval=0.05,
        low_rdy_idle_timeout=1.0,  # idle nsqd give up their credit after 1 s
        low_rdy_timeout=30.0,  # never from a busy one: it could still hold a message
    )
    watch = Watch(consumer)

    async def handler(message: Message) -> None:
        watch.enter()
        await asyncio.sleep(0.01)
        by_nsqd[message.nsqd_address] += 1
        watch.leave()

    consumer.add_handler(handler, concurrency=3)
    await consumer.connect_to_nsqds(p.nsqd for p in cluster)
    assert sum(c.rdy for c in consumer.connections()) == 1, "one credit for three connections"
    for proc in cluster:
        await publish(proc.nsqd, "rot1", [b"%d" % i for i in range(5)])
    await eventually(lambda: sum(by_nsqd.values()) >= 15, timeout=40, what="all 15 via rotation")
    assert by_nsqd == Counter({p.nsqd: 5 for p in cluster})
    assert watch.peak_total_rdy == 1 and watch.peak_held == 1
    watch.stop()
    await consumer.stop()


async def test_max_in_flight_32_is_split_over_three_nsqd(cluster: list[ServerProcess]) -> None:
    by_nsqd: Counter[str] = Counter()
    consumer = Consumer("split32", "ch", max_in_flight=32)
    watch = Watch(consumer)

    async def handler(message: Message) -> None:
        watch.enter()
        await asyncio.sleep(0.02)
        by_nsqd[message.nsqd_address] += 1
        watch.leave()

    consumer.add_handler(handler, concurrency=40)
    expected_rdys = [[32], [16, 16], [10, 10, 10]]  # existing connections shrink before the new one
    for proc, rdys in zip(cluster, expected_rdys, strict=True):
        await consumer.connect_to_nsqd(proc.nsqd)
        assert sorted(c.rdy for c in consumer.connections()) == rdys
    for proc in cluster:
        await publish(proc.nsqd, "split32", [b"%d" % i for i in range(100)])
    await eventually(lambda: sum(by_nsqd.values()) >= 300, timeout=30, what="all 300")
    assert by_nsqd == Counter({p.nsqd: 100 for p in cluster})
    assert watch.peak_total_rdy <= 32 and 10 < watch.peak_held <= 32, "several nsqd deliver at once"
    watch.stop()
    await consumer.stop()


async def test_max_in_flight_spread_over_three_nsqd_found_through_lookupd(
    cluster: list[ServerProcess], lookupd: LookupdProcess
) -> None:
    for proc in cluster:  # the topic exists on every nsqd, so each registers it with lookupd
        await publish(proc.nsqd, "found", [b"%d" % i for i in range(50)])
    by_nsqd: Counter[str] = Counter()
    consumer = Consumer("found", "ch", max_in_flight=30)

    async def handler(message: Message) -> None:
        await asyncio.sleep(0.01)
        by_nsqd[message.nsqd_address] += 1

    consumer.add_handler(handler, concurrency=30)
    await consumer.connect_to_lookupd(lookupd.http.removeprefix("http://"))
    await eventually(lambda: len(consumer.connections()) == 3, timeout=20, what="three nsqd from lookupd")
    assert sorted(c.rdy for c in consumer.connections()) == [10, 10, 10]
    await eventually(lambda: sum(by_nsqd.values()) >= 150, timeout=30, what="all 150")
    assert by_nsqd == Counter({p.nsqd: 50 for p in cluster})
    await consumer.stop()


async def test_backoff_pauses_everything_then_tests_with_one_message_then_recovers(
    cluster: list[ServerProcess],
) -> None:
    a, b = cluster[0], cluster[1]

    failed_at: list[float] = []
    handled: list[tuple[bytes, float, float]] = []
    consumer = Consumer("backoff", "ch", max_in_flight=6, backoff_multiplier=0.2, default_requeue_delay=0.0)
    watch = Watch(consumer)

    async def handler(message: Message) -> None:
        start = time.monotonic()
        if message.body == b"fail" and message.attempts == 1:
            failed_at.append(start)
            raise RuntimeError("first attempt fails")
        await asyncio.sleep(0.15)
        handled.append((message.body, start, time.monotonic()))

    consumer.add_handler(handler, concurrency=6)
    await consumer.connect_to_nsqds([a.nsqd, b.nsqd])
    assert sorted(c.rdy for c in consumer.connections()) == [3, 3]
    await publish(a.nsqd, "backoff", [b"fail"])
    await eventually(lambda: failed_at, what="the failure")
    await eventually(lambda: all(c.rdy == 0 for c in consumer.connections()), what="RDY 0 everywhere")
    await publish(a.nsqd, "backoff", [b"a%d" % i for i in range(5)])
    await publish(b.nsqd, "backoff", [b"b%d" % i for i in range(5)])
    await eventually(lambda: len(handled) == 11, what="everything handled")

    handled.sort(key=lambda item: item[1])
    window = 0.2 * 2  # backoff level 1
    assert handled[0][1] - failed_at[0] >= window - 0.01, "nothing delivered during the backoff window"
    assert handled[1][1] >= handled[0][2], "only one test message until it succeeded"
    overlapping = sum(1 for _, start, _ in handled[2:] if start < handled[2][2])
    assert overlapping > 1, "back to full RDY after the success"
    rdy_totals = [sum(rdys) for _, rdys in watch.states]
    zero = rdy_totals.index(0)
    one = rdy_totals.index(1, zero)
    assert 6 in rdy_totals[one:], f"RDY 3+3 -> 0 -> 1 -> 3+3 expected, saw {watch.states}"
    assert sorted(c.rdy for c in consumer.connections()) == [3, 3]
    assert watch.peak_total_rdy <= 6
    watch.stop()
    await consumer.stop()


async def test_change_max_in_flight_pauses_shrinks_and_resumes(cluster: list[ServerProcess]) -> None:
    got: list[bytes] = []

    async def handler(message: Message) -> None:
        got.append(message.body)

    consumer = Consumer("change", "ch", max_in_flight=4)
    consumer.add_handler(handler)
    await consumer.connect_to_nsqd(cluster[2].nsqd)
    [conn] = consumer.connections()
    assert conn.rdy == 4
    consumer.change_max_in_flight(2)
    assert conn.rdy == 2 and consumer.max_in_flight == 2
    consumer.change_max_in_flight(0)
    assert conn.rdy == 0
    await publish(cluster[2].nsqd, "change", [b"held back"])
    await asyncio.sleep(0.5)
    assert got == [], "max_in_flight 0 pauses delivery"
    consumer.change_max_in_flight(3)
    assert conn.rdy == 3
    await eventually(lambda: got == [b"held back"], what="delivery after resuming")
    await consumer.stop()

    two = Consumer("change2", "ch", max_in_flight=4)
    two.add_handler(handler)
    await two.connect_to_nsqds([cluster[1].nsqd, cluster[2].nsqd])
    assert [c.rdy for c in two.connections()] == [2, 2]
    two.change_max_in_flight(2)  # go-nsq would refuse these decreases (no "room"); they are always safe
    assert [c.rdy for c in two.connections()] == [1, 1]
    await two.stop()
