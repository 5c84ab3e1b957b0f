"""The NSQ Consumer against real ``tidemq nsqd`` processes: delivery, responses, heartbeats, stop, restart."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.nsq_support import RawNsq, publish
from tests.support import ServerProcess, eventually, run
from tidemq.nsq.client import (
    BlockingConsumer,
    Consumer,
    Message,
    NSQClientError,
    StoppedError,
)

pytestmark = pytest.mark.e2e


async def nothing_left(addr: str, topic: str, channel: str, wait: float = 0.5) -> bool:
    """No message (new, requeued or timed out) reaches a fresh subscriber of the channel."""
    sub = await RawNsq.open(addr)
    await sub.sub(topic, channel, rdy=100)
    try:
        await sub.message(timeout=wait)
    except TimeoutError:
        return True
    finally:
        sub.close()
    return False


async def test_every_message_arrives_once_and_is_finished(nsqd: ServerProcess) -> None:
    bodies = [b"m%d" % i for i in range(300)]

    seen: Counter[bytes] = Counter()

    async def handler(message: Message) -> None:
        assert message.nsqd_address == nsqd.nsqd and message.attempts == 1 and len(message.id) == 16
        seen[message.body] += 1

    consumer = Consumer("once", "ch", max_in_flight=20)
    consumer.add_handler(handler, concurrency=4)
    await consumer.connect_to_nsqd(nsqd.nsqd)
    await publish(nsqd.nsqd, "once", bodies)
    await eventually(lambda: sum(seen.values()) >= len(bodies), what="all delivered")
    await asyncio.sleep(1.5)  # an unFINed message would come back after the 1 s msg timeout
    assert set(seen) == set(bodies) and set(seen.values()) == {1}
    stats = consumer.stats()
    assert (stats.messages_received, stats.messages_finished, stats.messages_requeued) == (300, 300, 0)
    assert stats.connections == 1
    await consumer.stop()
    assert consumer.stats().connections == 0 and consumer.is_stopped
    assert await nothing_left(nsqd.nsqd, "once", "ch")


async def test_handler_failure_requeues_with_growing_delay_then_gives_up(nsqd: ServerProcess) -> None:
    deliveries: list[tuple[int, float]] = []
    failed: list[tuple[int, str]] = []

    async def handler(message: Message) -> None:
        deliveries.append((message.attempts, time.monotonic()))
        raise RuntimeError("cannot handle this")

    def hook(message: Message) -> None:  # a plain function: runs in a worker thread
        failed.append((message.attempts, threading.current_thread().name))

    consumer = Consumer(
        "fails",
        "ch",
        max_in_flight=1,
        max_attempts=3,
        default_requeue_delay=0.3,
        max_requeue_delay=0.5,
        backoff_multiplier=0.01,
    )
    consumer.add_handler(handler, failed_message_hook=hook)
    await consumer.connect_to_nsqd(nsqd.nsqd)
    await publish(nsqd.nsqd, "fails", [b"poison"])
    await eventually(lambda: failed, what="failed-message hook")
    assert [attempts for attempts, _ in deliveries] == [1, 2, 3]
    assert deliveries[1][1] - deliveries[0][1] >= 0.3  # REQ 300 ms (0.3 s x attempt 1)
    assert deliveries[2][1] - deliveries[1][1] >= 0.5  # 0.3 s x 2, capped at 0.5 s
    assert failed[0][0] == 4 and failed[0][1] != threading.main_thread().name
    await asyncio.sleep(1.3)
    assert len(deliveries) == 3 and len(failed) == 1, "the hook's auto-FIN removed it for good"
    stats = consumer.stats()
    assert (stats.messages_received, stats.messages_finished, stats.messages_requeued) == (4, 1, 3)
    await consumer.stop()


async def test_manual_responses_touch_and_first_response_wins(nsqd: ServerProcess) -> None:
    held: list[Message] = []
    deliveries: list[bytes] = []

    async def handler(message: Message) -> None:
        deliveries.append(message.body)
        if message.body == b"slow" or message.attempts == 1:
            message.disable_auto_response()
            held.append(message)

    consumer = Consumer("manual", "ch", max_in_flight=5)
    consumer.add_handler(handler)
    await consumer.connect_to_nsqd(nsqd.nsqd)
    await publish(nsqd.nsqd, "manual", [b"slow", b"quick"])
    await eventually(lambda: len(held) == 2, what="both delivered")
    slow, quick = sorted(held, key=lambda m: m.body != b"slow")
    quick.requeue(0, backoff=False)
    for _ in range(5):  # 2 s in total, twice the 1 s msg timeout: TOUCH keeps it ours
        await asyncio.sleep(0.4)
        slow.touch()
    assert sorted(deliveries) == [b"quick", b"quick", b"slow"], "requeued at once, delivered again"
    assert not slow.has_responded and slow.is_auto_response_disabled and quick.has_responded
    with pytest.raises(ValueError):
        slow.requeue(-5)
    slow.finish()
    slow.finish()
    slow.requeue()
    slow.touch()
    assert slow.has_responded
    await asyncio.sleep(1.3)
    assert len(deliveries) == 3
    stats = consumer.stats()
    assert (stats.messages_finished, stats.messages_requeued) == (2, 1)
    await consumer.stop()
    assert await nothing_left(nsqd.nsqd, "manual", "ch")


async def test_never_more_unacknowledged_messages_than_max_in_flight(nsqd: ServerProcess) -> None:
    held: set[bytes] = set()
    peak = 0
    starved_seen = False
    done: list[bytes] = []
    consumer = Consumer("window", "ch", max_in_flight=4)

    async def handler(message: Message) -> None:
        nonlocal peak, starved_seen
        message.disable_auto_response()
        held.add(message.id)
        peak = max(peak, len(held))
        starved_seen = starved_seen or consumer.is_starved()

        def answer() -> None:
            held.discard(message.id)
            done.append(message.body)
            message.finish()

        asyncio.get_running_loop().call_later(0.005 * (len(done) % 5), answer)

    consumer.add_handler(handler, concurrency=8)
    await consumer.connect_to_nsqd(nsqd.nsqd)
    await publish(nsqd.nsqd, "window", [b"%d" % i for i in range(120)])
    await eventually(lambda: len(done) >= 120, what="all answered")
    assert peak == 4, f"RDY 4 lets at most 4 unanswered messages in (peak {peak})"
    assert starved_seen
    assert [c.rdy for c in consumer.connections()] == [4]
    await consumer.stop()


async def test_rdy_is_capped_at_the_servers_max_rdy_count(
    nsqd: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    got: list[bytes] = []

    async def handler(message: Message) -> None:
        got.append(message.body)

    consumer = Consumer("bigwindow", "ch", max_in_flight=3000)
    consumer.add_handler(handler)
    with caplog.at_level(logging.WARNING, logger="tidemq.nsq.client"):
        await consumer.connect_to_nsqd(nsqd.nsqd)
    assert any("max RDY count 2500 < consumer max in flight 3000" in r.message for r in caplog.records)
    [conn] = consumer.connections()
    assert conn.rdy == 2500 and conn.identify is not None and conn.identify.max_rdy_count == 2500
    await publish(nsqd.nsqd, "bigwindow", [b"x"])
    await eventually(lambda: got, what="delivery")
    assert consumer.stats().connections == 1, "an RDY above the server's max would be fatal"
    await consumer.stop()


async def test_heartbeats_are_answered_while_idle_and_while_handlers_are_slow(nsqd: ServerProcess) -> None:
    got: list[bytes] = []
    release = threading.Event()

    def handler(message: Message) -> None:  # blocks a worker thread for a long time
        if message.body == b"block":
            release.wait(10)
        got.append(message.body)

    consumer = Consumer(
        "hb", "ch", heartbeat_interval=1.0, read_timeout=2.0, msg_timeout=10.0, max_in_flight=2
    )
    consumer.add_handler(handler)
    await consumer.connect_to_nsqd(nsqd.nsqd)
    [conn] = consumer.connections()
    await asyncio.sleep(3.5)  # nsqd closes clients silent for two heartbeat intervals
    await publish(nsqd.nsqd, "hb", [b"block", b"queued"])
    await asyncio.sleep(3.0)  # the only handler is stuck; the connection must still answer heartbeats
    assert consumer.connections() == [conn] and not conn.is_closed
    release.set()
    await eventually(lambda: len(got) == 2, what="both handled")
    assert consumer.connections() == [conn]
    await consumer.stop()


async def test_graceful_stop_answers_in_flight_messages(nsqd: ServerProcess) -> None:
    started: list[bytes] = []
    finished: list[bytes] = []

    async def handler(message: Message) -> None:
        started.append(message.body)
        await asyncio.sleep(0.5)
        finished.append(message.body)

    consumer = Consumer("graceful", "ch", max_in_flight=10)
    consumer.add_handler(handler, concurrency=10)
    await consumer.connect_to_nsqd(nsqd.nsqd)
    await publish(nsqd.nsqd, "graceful", [b"%d" % i for i in range(15)])
    await eventually(lambda: len(started) == 10, what="ten in flight")
    t0 = time.monotonic()
    await consumer.stop()
    assert time.monotonic() - t0 < 10, "stopped by the last FIN, not by the fallback"
    assert sorted(finished) == sorted(started) and len(started) == 10
    assert consumer.stats().messages_finished == 10
    sub = await RawNsq.open(nsqd.nsqd)
    await sub.sub("graceful", "ch", rdy=20)
    rest = []
    for _ in range(5):
        msg = await sub.message(timeout=5)
        sub.send("FIN", msg.id)
        rest.append(msg.body)
    assert sorted(rest + started) == sorted(b"%d" % i for i in range(15)), "nothing lost, nothing twice"
    with pytest.raises(TimeoutError):
        await sub.message(timeout=1.5)  # the ten FINed ones do not come back after the msg timeout
    sub.close()


async def test_stop_fallback_when_a_handler_hangs(nsqd: ServerProcess) -> None:
    entered = asyncio.Event()

    async def handler(message: Message) -> None:
        entered.set()
        await asyncio.sleep(60)

    consumer = Consumer("hang", "ch")
    consumer.add_handler(handler)
    await consumer.connect_to_nsqd(nsqd.nsqd)
    await publish(nsqd.nsqd, "hang", [b"x"])
    await asyncio.wait_for(entered.wait(), 10)
    t0 = time.monotonic()
    await consumer.stop(timeout=0.5)
    assert 0.4 < time.monotonic() - t0 < 5
    assert consumer.is_stopped and consumer.stats().connections == 0


async def test_lifecycle_errors(nsqd: ServerProcess) -> None:
    consumer = Consumer("life", "ch")
    with pytest.raises(NSQClientError, match="no handlers"):
        await consumer.connect_to_nsqd(nsqd.nsqd)
    consumer.add_handler(lambda message: None)
    with pytest.raises(ValueError):
        consumer.add_handler(lambda message: None, concurrency=0)
    await consumer.connect_to_nsqd(nsqd.nsqd)
    with pytest.raises(NSQClientError):
        await consumer.connect_to_nsqd(nsqd.nsqd)  # already connected
    with pytest.raises(RuntimeError):
        consumer.add_handler(lambda message: None)
    with pytest.raises(NSQClientError):
        await consumer.disconnect_from_nsqd("127.0.0.1:1")
    with pytest.raises(ValueError):
        consumer.change_max_in_flight(-1)
    async with consumer:
        pass
    await consumer.stop()
    await consumer.wait_stopped()
    with pytest.raises(StoppedError):
        await consumer.connect_to_nsqd(nsqd.nsqd)
    never = Consumer("life", "ch")
    await never.stop()
    assert never.is_stopped


async def test_reconnects_to_a_restarted_nsqd(tmp_path: Path) -> None:
    proc = ServerProcess(tmp_path / "d", command="nsqd").start()

    try:
        got: list[bytes] = []

        async def handler(message: Message) -> None:
            got.append(message.body)

        consumer = Consumer("restart", "ch", lookupd_poll_interval=0.2, max_in_flight=5)
        consumer.add_handler(handler)
        await consumer.connect_to_nsqd(proc.nsqd)
        await publish(proc.nsqd, "restart", [b"before"])
        await eventually(lambda: got == [b"before"], what="first delivery")
        await asyncio.to_thread(proc.stop)
        await eventually(lambda: consumer.stats().connections == 0, what="disconnect noticed")
        await asyncio.sleep(0.5)  # a few failed reconnect attempts
        await asyncio.to_thread(proc.start)
        await eventually(lambda: consumer.stats().connections == 1, what="reconnected")
        await publish(proc.nsqd, "restart", [b"after"])
        await eventually(lambda: b"after" in got, what="delivery after restart")
        assert set(got) == {b"before", b"after"}  # "before" again if its FIN was still in transit at the stop
        await consumer.disconnect_from_nsqd(proc.nsqd)
        await eventually(lambda: consumer.stats().connections == 0, what="disconnected")
        await asyncio.sleep(0.5)
        assert consumer.stats().connections == 0, "a removed address is not reconnected"
        await consumer.stop()
    finally:
        proc.stop()


def test_blocking_consumer_runs_plain_handlers_in_threads(nsqd: ServerProcess) -> None:
    threads: set[str] = set()
    handled: list[bytes] = []
    lock = threading.Lock()

    def handler(message: Message) -> None:
        with lock:
            threads.add(threading.current_thread().name)
            handled.append(message.body)
        if message.body == b"later":
            message.disable_auto_response()
            threading.Timer(0.2, message.finish).start()  # answered later, from yet another thread
        elif message.body == b"bad" and message.attempts == 1:
            raise ValueError("try again")

    consumer = BlockingConsumer(
        "blocking",
        "ch",
        handler,
        concurrency=3,
        nsqd_tcp_addresses=[nsqd.nsqd],
        max_in_flight=5,
        msg_timeout=10.0,
        default_requeue_delay=0.0,
        backoff_multiplier=0.01,
    )
    with consumer:
        run(publish(nsqd.nsqd, "blocking", [b"a", b"later", b"bad", b"b"]))
        deadline = time.monotonic() + 10
        while consumer.stats().messages_finished < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        stats = consumer.stats()
        assert (stats.messages_finished, stats.messages_requeued) == (4, 1)
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 5, "stop did not need its fallback"
    assert sorted(handled) == [b"a", b"b", b"bad", b"bad", b"later"]
    assert threading.current_thread().name not in threads and "tidemq-client-loop" not in threads
    assert run(nothing_left(nsqd.nsqd, "blocking", "ch", wait=1.3))
