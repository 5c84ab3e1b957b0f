"""Producer auto-batching (client/auto_batch.py) against a real server: single sends gathered into batch
sends, each future with its own SendResult."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest

from tests.support import RawClient, ServerProcess, eventually, unique
from tidemq.client import BlockingProducer
from tidemq.client.api import BrokerError
from tidemq.client.auto_batch import AutoBatchSettings, SendCallback
from tidemq.client.message import Message, SendResult, SendStatus
from tidemq.client.producer import Producer
from tidemq.remoting.codes import ResponseCode


async def _queue_bodies(addr: str, topic: str, queues: int = 4) -> dict[int, list[bytes]]:
    c = await RawClient.open(addr)
    try:
        return {q: [m.body for m in await c.drain(topic, q)] for q in range(queues)}
    finally:
        c.close()


def _batch_requests(producer: Producer) -> list[int]:
    """Counts the batch requests the producer puts on the wire (by wrapping its request builder)."""
    sizes: list[int] = []
    header = producer._header

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        if kwargs.get("batch"):
            sizes.append(1)
        return header(*args, **kwargs)

    producer._header = counting  # type: ignore[method-assign]
    return sizes


@pytest.mark.e2e
async def test_futures_get_own_ids_and_consecutive_offsets(server: ServerProcess) -> None:
    topic = unique("AutoBatch")
    async with Producer(unique("PG"), server.namesrv, auto_batch=True) as producer:
        await producer.queues_for(topic)
        batches = _batch_requests(producer)
        futures = [producer.send_async(Message(topic, f"m{i}".encode())) for i in range(200)]
        results: list[SendResult] = list(await asyncio.gather(*futures))
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert len({r.msg_id for r in results}) == 200 and len({r.offset_msg_id for r in results}) == 200
    assert all(r.offset_msg_id for r in results)
    assert 1 <= len(batches) <= 8, f"200 sends in one loop turn should take a few batches: {len(batches)}"
    by_queue: dict[int, list[int]] = {}
    for r in results:
        by_queue.setdefault(r.message_queue.queue_id, []).append(r.queue_offset)
    for offsets in by_queue.values():
        assert sorted(offsets) == list(range(min(offsets), min(offsets) + len(offsets)))
    stored = await _queue_bodies(server.broker, topic)
    for r, i in zip(results, range(200), strict=True):
        assert stored[r.message_queue.queue_id][r.queue_offset] == f"m{i}".encode()


@pytest.mark.e2e
async def test_callbacks_hear_their_own_result_and_one_that_raises_stops_no_other(
    server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    topic = unique("AutoCallback")
    heard: dict[int, tuple[SendResult | None, BaseException | None]] = {}

    def callback_for(i: int) -> SendCallback:
        def callback(result: SendResult | None, error: BaseException | None) -> None:
            heard[i] = (result, error)
            if i % 10 == 3:
                raise RuntimeError(f"callback {i} raises")

        return callback

    async with Producer(unique("PG"), server.namesrv, auto_batch=True) as producer:
        await producer.queues_for(topic)
        futures = [producer.send_async(Message(topic, b"m%d" % i), callback_for(i)) for i in range(100)]
        cancelled = producer.send_async(Message(topic, b"cancelled"), callback_for(100))
        cancelled.cancel()  # the message still goes with its batch; its callback hears of the cancel
        results = await asyncio.gather(*futures)
    assert sorted(heard) == list(range(101))
    for i, result in enumerate(results):
        assert heard[i] == (result, None)
    assert heard[100][0] is None and isinstance(heard[100][1], asyncio.CancelledError)
    assert sum("a send_async callback raised" in r.message for r in caplog.records) == 10


@pytest.mark.e2e
async def test_a_failed_batch_tells_every_callback_and_its_dropped_futures_stay_quiet(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    proc = ServerProcess(tmp_path / "data", "--max-message-size", "3000").start()
    try:
        topic = unique("AutoBigCallback")
        heard: list[tuple[SendResult | None, BaseException | None]] = []
        async with Producer(unique("PG"), proc.namesrv, auto_batch=True) as producer:
            await producer.queues_for(topic)
            for _ in range(40):  # the futures dropped at once: the callbacks take the outcome
                producer.send_async(Message(topic, bytes(400)), lambda r, e: heard.append((r, e)))
        assert len(heard) == 40
        assert all(r is None and isinstance(e, BrokerError) for r, e in heard), heard
        heard.clear()  # the errors' tracebacks hold the batch and its futures
        gc.collect()
        await asyncio.sleep(0)
        assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
    finally:
        proc.stop()


@pytest.mark.e2e
async def test_a_batch_failing_after_some_messages_were_settled_tells_no_callback_twice(
    server: ServerProcess,
) -> None:
    topic = unique("AutoHookRaises")
    heard: dict[int, list[BaseException | None]] = {}

    def hook(msg: Message, _mq: object, result: SendResult | None, _error: BaseException | None) -> None:
        if result is not None and msg.body == b"m5":
            raise RuntimeError("an interceptor fails on the sixth message")

    async with Producer(unique("PG"), server.namesrv, auto_batch=True) as producer:
        await producer.queues_for(topic)
        producer.interceptors.append(hook)
        mq = (await producer.queues_for(topic))[0]
        futures = [
            producer.send_async(
                Message(topic, b"m%d" % i), lambda _r, e, i=i: heard.setdefault(i, []).append(e), queue=mq
            )
            for i in range(10)
        ]
        outcomes = await asyncio.gather(*futures, return_exceptions=True)
    assert sorted(heard) == list(range(10))
    assert all(len(told) == 1 for told in heard.values()), heard
    assert [e is None for i in range(10) for e in heard[i]] == [i < 5 for i in range(10)]
    assert [isinstance(o, SendResult) for o in outcomes] == [i < 5 for i in range(10)]


@pytest.mark.e2e
async def test_order_per_sharding_key_and_plain_send(server: ServerProcess) -> None:
    topic = unique("AutoOrder")
    async with Producer(unique("PG"), server.namesrv, auto_batch=True) as producer:
        await producer.queues_for(topic)
        futures = []
        for i in range(300):
            key = f"order-{i % 3}"
            futures.append(producer.send_async(Message(topic, f"{key}:{i}".encode()), sharding_key=key))
            if i % 50 == 0:
                await asyncio.sleep(0.001)  # later sends gather while a batch is in flight
        one = await producer.send(Message(topic, b"awaited"), sharding_key="order-0")
        results = await asyncio.gather(*futures)
    queue_of = {f"order-{k}": {r.message_queue.queue_id for r in results[k::3]} for k in range(3)}
    assert all(len(q) == 1 for q in queue_of.values()), queue_of
    assert one.message_queue.queue_id in queue_of["order-0"]
    stored = await _queue_bodies(server.broker, topic)
    for key in queue_of:
        (qid,) = queue_of[key]
        seen = [int(b.split(b":")[1]) for b in stored[qid] if b.startswith(key.encode() + b":")]
        assert seen == sorted(seen) and len(seen) == 100


@pytest.mark.e2e
async def test_a_refused_batch_fails_every_future(tmp_path: Path) -> None:
    proc = ServerProcess(tmp_path / "data", "--max-message-size", "3000").start()
    try:
        topic = unique("AutoBig")
        async with Producer(unique("PG"), proc.namesrv, auto_batch=True) as producer:
            await producer.queues_for(topic)
            futures = [producer.send_async(Message(topic, bytes(400))) for _ in range(40)]
            outcomes = await asyncio.gather(*futures, return_exceptions=True)
            alone = await producer.send(Message(topic, bytes(400)))  # one fits
        assert alone.status is SendStatus.SEND_OK
        assert all(isinstance(o, BrokerError) for o in outcomes), outcomes
        assert {o.code for o in outcomes if isinstance(o, BrokerError)} == {ResponseCode.MESSAGE_ILLEGAL}
        stored = await _queue_bodies(proc.broker, topic)
        assert sum(len(b) for b in stored.values()) == 1
    finally:
        proc.stop()


@pytest.mark.e2e
async def test_shutdown_sends_what_is_gathered(server: ServerProcess) -> None:
    topic = unique("AutoFlush")
    producer = Producer(
        unique("PG"), server.namesrv, auto_batch=True, batch_max_delay_ms=30_000, send_timeout=20
    )
    await producer.start()
    await producer.queues_for(topic)
    invoke = producer._invoke

    async def slow_invoke(*args, **kwargs):  # type: ignore[no-untyped-def]
        await asyncio.sleep(1.5)  # batches still out when shutdown starts
        return await invoke(*args, **kwargs)

    producer._invoke = slow_invoke  # type: ignore[method-assign]
    first = producer.send_async(Message(topic, b"first"), queue=None)
    await asyncio.sleep(0)  # "first" goes out; the rest gather behind it
    futures = [producer.send_async(Message(topic, f"{i}".encode())) for i in range(50)]
    started = asyncio.get_running_loop().time()
    await producer.shutdown()
    assert first.done() and all(f.done() for f in futures), "shutdown returned before the answers"
    assert asyncio.get_running_loop().time() - started >= 2.5, "two batches, one after the other"
    assert first.result().status is SendStatus.SEND_OK
    assert all(f.result().status is SendStatus.SEND_OK for f in futures)
    stored = await _queue_bodies(server.broker, topic)
    assert sum(len(b) for b in stored.values()) == 51


@pytest.mark.e2e
async def test_delay_level_and_big_bodies_go_alone(server: ServerProcess) -> None:
    topic = unique("AutoAlone")
    async with Producer(unique("PG"), server.namesrv, auto_batch=True, batch_max_bytes=1000) as producer:
        await producer.queues_for(topic)
        batches = _batch_requests(producer)
        delayed = producer.send_async(Message(topic, b"later", delay_level=1))
        big = producer.send_async(Message(topic, bytes(2000)))
        plain = producer.send_async(Message(topic, b"now"))
        assert (await plain).status is SendStatus.SEND_OK
        assert (await big).status is SendStatus.SEND_OK and (await delayed).status is SendStatus.SEND_OK
        assert len(batches) == 1, "only the plain message went in a batch"
        now = await _queue_bodies(server.broker, topic)
        assert b"later" not in [b for bodies in now.values() for b in bodies], "delayed, not batched"

        async def arrived() -> bool:
            bodies = await _queue_bodies(server.broker, topic)
            return b"later" in [b for q in bodies.values() for b in q]

        await eventually(arrived, timeout=15)


@pytest.mark.e2e
def test_blocking_producer_takes_the_options(server: ServerProcess) -> None:
    topic = unique("AutoBlocking")
    with BlockingProducer(
        unique("PG"), server.namesrv, auto_batch=True, batch_max_delay_ms=5, batch_max_bytes=4096
    ) as producer:
        futures = [producer.send_async(Message(topic, f"{i}".encode())) for i in range(20)]
        results = [f.result(timeout=10) for f in futures]
        assert producer.send(Message(topic, b"sync")).status is SendStatus.SEND_OK
    assert len({r.msg_id for r in results}) == 20


def test_settings_are_checked_like_java() -> None:
    with pytest.raises(ValueError, match="batch_max_delay_ms"):
        AutoBatchSettings(max_delay_ms=0)
    with pytest.raises(ValueError, match="batch_max_bytes"):
        AutoBatchSettings(max_bytes=3 * 1024 * 1024)
    assert AutoBatchSettings() == AutoBatchSettings(10, 32 * 1024, 1024, 32 * 1024 * 1024)


@pytest.mark.e2e
async def test_held_bytes_above_the_total_make_sends_wait(server: ServerProcess) -> None:
    topic = unique("AutoPressure")
    async with Producer(
        unique("PG"), server.namesrv, auto_batch=True, batch_max_bytes=1024, total_batch_max_bytes=2048
    ) as producer:
        await producer.queues_for(topic)
        batcher = producer._batcher
        assert batcher is not None
        held: list[int] = []
        producer.interceptors.append(lambda msg, mq, res, exc: held.append(batcher.held) if msg else None)
        futures = [producer.send_async(Message(topic, bytes(300))) for _ in range(60)]
        results = await asyncio.gather(*futures)
    assert len({r.msg_id for r in results}) == 60
    assert max(held) <= 2048 + 400, f"held {max(held)} bytes, over the total limit"
