"""The Python producer against real servers."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from tests.support import RawClient, ServerProcess, TwoBrokers, free_port
from tidemq.client.instance import MQClientError
from tidemq.client.message import Message, SendStatus
from tidemq.client.message_queue import MessageQueue
from tidemq.client.producer import Producer
from tidemq.record import Prop, decode_properties


async def _pull_all(addr: str, topic: str, queues: int = 4) -> list:  # type: ignore[type-arg]
    c = await RawClient.open(addr)
    out = [m for q in range(queues) for m in await c.drain(topic, q)]
    c.close()
    return out


@pytest.mark.e2e
async def test_sync_async_oneway_and_batch(server: ServerProcess) -> None:
    async with Producer("PG1", server.namesrv) as producer:
        r = await producer.send(
            Message("ProdTopic", b"sync", tags="A", keys=["k1", "k2"], properties={"p": "v"})
        )
        assert r.status is SendStatus.SEND_OK and r.message_queue.topic == "ProdTopic"
        assert len(r.msg_id) == 32 and r.offset_msg_id != r.msg_id
        got: list[object] = []
        task = producer.send_async(Message("ProdTopic", b"async"), lambda res, exc: got.append(res or exc))
        assert (await task).status is SendStatus.SEND_OK
        await producer.send_oneway(Message("ProdTopic", b"oneway"))
        batch = await producer.send_batch([Message("ProdTopic", f"b{i}".encode()) for i in range(10)])
        assert len(batch.msg_id.split(",")) == 10
        await asyncio.sleep(0.2)
        assert len(got) == 1
    msgs = await _pull_all(server.broker, "ProdTopic")
    bodies = sorted(m.body for m in msgs)
    assert bodies == sorted([b"sync", b"async", b"oneway"] + [f"b{i}".encode() for i in range(10)])
    first = next(m for m in msgs if m.body == b"sync")
    assert first.tags == "A" and first.keys == "k1 k2" and first.properties["p"] == "v"
    assert first.msg_id == r.msg_id
    assert {m.queue_id for m in msgs} == {0, 1, 2, 3}, "round robin over the queues"


@pytest.mark.e2e
async def test_ordered_send_keeps_a_key_on_one_queue(server: ServerProcess) -> None:
    async with Producer("PG2", server.namesrv) as producer:
        queues = set()
        for i in range(20):
            r = await producer.send(Message("OrderedTopic", f"{i}".encode()), sharding_key="order-7")
            queues.add(r.message_queue.queue_id)
        assert len(queues) == 1
        picked = await producer.send(
            Message("OrderedTopic", b"x"), selector=lambda mqs, msg, arg: mqs[arg], arg=2
        )
        assert picked.message_queue.queue_id == 2
    (q,) = queues
    msgs = await _pull_all(server.broker, "OrderedTopic")
    assert [m.body for m in msgs if m.queue_id == q] == [f"{i}".encode() for i in range(20)]


@pytest.mark.e2e
async def test_explicit_queue_works_before_the_route_is_known(server: ServerProcess) -> None:
    for name in ("PG6", "PG7"):  # a fresh producer each time: no route cached yet
        async with Producer(name, server.namesrv) as producer:
            mq = MessageQueue("ExplicitQueueTopic", "broker-a", 1)
            if name == "PG6":
                result = await producer.send(Message("ExplicitQueueTopic", b"one"), queue=mq)
            else:
                result = await producer.send_batch([Message("ExplicitQueueTopic", b"two")], queue=mq)
            assert result.message_queue.queue_id == 1


@pytest.mark.e2e
async def test_compression_size_limit_and_bad_input(server: ServerProcess) -> None:
    async with Producer("PG3", server.namesrv) as producer:
        big = bytes(range(256)) * 64  # 16 KiB, compressible
        await producer.send(Message("Compressed", big))
        with pytest.raises(MQClientError, match="exceeds the maximum message size"):
            await producer.send(Message("Compressed", b"x" * (4 * 1024 * 1024 + 1)))
        with pytest.raises(MQClientError, match="invalid topic"):
            await producer.send(Message("bad topic", b"x"))
        with pytest.raises(MQClientError, match="non-empty"):
            await producer.send(Message("Compressed", b""))
    (msg,) = await _pull_all(server.broker, "Compressed")
    assert msg.sys_flag & 1 and msg.body == big  # stored compressed, inflated by the reader


async def test_unreachable_name_server_is_a_clear_error() -> None:
    producer = Producer("PG4", f"127.0.0.1:{free_port()}")
    await producer.start()
    with pytest.raises(MQClientError, match="name server unreachable"):
        await producer.send(Message("Anything", b"x"))
    await producer.shutdown()


@pytest.mark.e2e
async def test_broker_down_sends_go_to_the_other_broker(two_brokers: TwoBrokers) -> None:
    namesrv, brokers = two_brokers.namesrv, two_brokers.brokers
    for b in brokers:
        c = await RawClient.open(b.broker)
        await c.create_topic("Failover", 2)
        c.close()
    async with Producer("PG5", namesrv.namesrv, send_timeout=10) as producer:
        seen = {(await producer.send(Message("Failover", b"x"))).message_queue.broker_name for _ in range(8)}
        assert seen == {"broker-0", "broker-1"}
        brokers[0].kill()
        for _ in range(10):
            r = await producer.send(Message("Failover", b"after"))
            assert r.message_queue.broker_name == "broker-1"


async def test_every_attempt_of_a_retry_topic_send_carries_the_reconsume_count() -> None:
    """The reconsume counts move from the properties into the header on every attempt of a send (a
    retried send reuses the properties), so the broker's dead-letter decision sees them each time."""

    producer = Producer("PG", namesrv_addr="127.0.0.1:1")  # never started: it only builds headers
    props = {Prop.RECONSUME_TIME: "3", Prop.MAX_RECONSUME_TIMES: "5", "k": "v"}
    for _attempt in range(2):
        header = producer._header("%RETRY%G", 0, 0, props)
        assert (header.reconsume_times, header.max_reconsume_times) == (3, 5)
        assert decode_properties(header.properties) == {"k": "v"}


@pytest.mark.e2e
async def test_a_send_whose_time_ran_out_says_so(fresh_server: ServerProcess) -> None:
    """One attempt used up the whole send timeout: the error says the time ran out, not "failed after 3
    attempts" (Java's "call timeout")."""

    async with Producer("PGTimeout", fresh_server.namesrv) as producer:
        await producer.send(Message("Frozen", b"route and connection first"))
        assert fresh_server.proc is not None
        os.kill(fresh_server.proc.pid, signal.SIGSTOP)  # the broker takes the request, never answers
        try:
            with pytest.raises(MQClientError) as caught:
                await producer.send(Message("Frozen", b"x"), timeout=1.0)
        finally:
            os.kill(fresh_server.proc.pid, signal.SIGCONT)
    text = str(caught.value)
    assert "ran out of time" in text and "1 s send timeout" in text and "1 attempt;" in text, text
    assert "after 3 attempts" not in text


@pytest.mark.e2e
async def test_send_latency_fault_avoidance_is_off_by_default_and_isolates_when_on(
    two_brokers: TwoBrokers,
) -> None:
    """Java's sendLatencyFaultEnable: off by default, a send that failed on a broker is retried on another
    one and the next send tries the failed broker again; on, one failure keeps that broker out."""
    namesrv, brokers = two_brokers.namesrv, two_brokers.brokers

    async def attempts_on_dead_broker(producer: Producer) -> int:
        failed: list[str] = []

        def hook(msg: Message, mq: MessageQueue | None, result: object, exc: BaseException | None) -> None:
            if exc is not None and mq is not None:
                failed.append(mq.broker_name)

        producer.interceptors.append(hook)
        for _ in range(12):
            r = await producer.send(Message("FaultModes", b"after"))
            assert r.message_queue.broker_name == "broker-1", "every send lands on the live broker"
        producer.interceptors.remove(hook)
        assert set(failed) <= {"broker-0"}
        return len(failed)

    for b in brokers:
        c = await RawClient.open(b.broker)
        await c.create_topic("FaultModes", 2)
        c.close()
    default = Producer("PGFaultOff", namesrv.namesrv, send_timeout=10)
    avoiding = Producer("PGFaultOn", namesrv.namesrv, send_timeout=10, send_latency_fault_enable=True)
    assert default.send_latency_fault_enable is False
    async with default, avoiding:
        for producer in (default, avoiding):
            seen = {
                (await producer.send(Message("FaultModes", b"x"))).message_queue.broker_name for _ in range(8)
            }
            assert seen == {"broker-0", "broker-1"}
        brokers[0].kill()
        assert await attempts_on_dead_broker(avoiding) == 1, "isolated after its first failure"
        assert await attempts_on_dead_broker(default) > 1, "round robin keeps trying it (Java)"
