"""The NSQ Producer (and its blocking facade) against a real ``tidemq nsqd`` process."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.nsq_support import RawNsq
from tests.support import ServerProcess, free_port, run
from tidemq.nsq.client import (
    BlockingProducer,
    NotConnectedError,
    NSQClientError,
    Producer,
    ProtocolError,
    StoppedError,
)

pytestmark = pytest.mark.e2e


async def drain(sub: RawNsq, count: int, timeout: float = 10.0) -> list[bytes]:
    bodies = []
    for _ in range(count):
        msg = await sub.message(timeout)
        sub.send("FIN", msg.id)
        bodies.append(msg.body)
    return bodies


async def test_publish_multi_publish_deferred_publish_round_trip(nsqd: ServerProcess) -> None:
    sub = await RawNsq.open(nsqd.nsqd)
    await sub.sub("prod_rt", "ch", rdy=10)
    async with Producer(nsqd.nsqd) as producer:
        assert not producer.is_connected, "connects lazily"
        await producer.publish("prod_rt", b"one")
        assert producer.is_connected
        await producer.multi_publish("prod_rt", [b"two", b"three"])
        started = time.monotonic()
        await producer.deferred_publish("prod_rt", 0.6, b"later")
        await producer.publish("prod_rt", bytearray(b"four"))
        assert await drain(sub, 4) == [b"one", b"two", b"three", b"four"]
        assert await drain(sub, 1) == [b"later"]
        assert time.monotonic() - started >= 0.55
    sub.close()


async def test_error_frames_raise_protocol_error_and_the_producer_recovers(nsqd: ServerProcess) -> None:
    sub = await RawNsq.open(nsqd.nsqd)
    await sub.sub("prod_err", "ch", rdy=10)
    async with Producer(nsqd.nsqd) as producer:
        cases = [
            (producer.publish("bad!topic", b"x"), "E_BAD_TOPIC"),
            (producer.multi_publish("bad!topic", [b"x"]), "E_BAD_TOPIC"),
            (producer.deferred_publish("bad!topic", 1, b"x"), "E_BAD_TOPIC"),
            (producer.publish("prod_err", b""), "E_BAD_MESSAGE"),
            (producer.multi_publish("prod_err", []), "E_BAD_BODY"),
            (producer.deferred_publish("prod_err", 3601, b"x"), "E_INVALID"),
        ]
        for call, code in cases:
            with pytest.raises(ProtocolError) as info:
                await call
            assert info.value.code == code and info.value.fatal
            await producer.publish("prod_err", code.encode())  # reconnects after the fatal error
        with pytest.raises(ValueError):
            await producer.publish("two words", b"x")
        with pytest.raises(ValueError):
            await producer.deferred_publish("prod_err", -1, b"x")
        with pytest.raises(TypeError):
            await producer.publish("prod_err", "text")  # type: ignore[arg-type]
    assert await drain(sub, len(cases)) == [code.encode() for _, code in cases]
    sub.close()


async def test_pipelined_concurrent_publishes_share_one_connection(nsqd: ServerProcess) -> None:
    count = 3000

    sub = await RawNsq.open(nsqd.nsqd)
    await sub.sub("prod_pipe", "ch", rdy=2500)
    producer = Producer(nsqd.nsqd)
    await producer.ping()
    conn = producer._conn
    futures = [producer.publish_async("prod_pipe", b"a%d" % i) for i in range(count // 3)]
    await asyncio.gather(*(producer.publish("prod_pipe", b"p%d" % i) for i in range(count // 3)))
    await asyncio.gather(
        *(producer.multi_publish("prod_pipe", [b"m%d" % i]) for i in range(count // 3)), *futures
    )
    assert producer._conn is conn, "everything went over the first connection"
    received = set(await drain(sub, count, timeout=20))
    expected = {b"%s%d" % (kind, i) for kind in (b"a", b"p", b"m") for i in range(count // 3)}
    assert received == expected
    await producer.stop()
    sub.close()


async def test_heartbeats_keep_an_idle_producer_connected(nsqd: ServerProcess) -> None:
    producer = Producer(nsqd.nsqd, heartbeat_interval=1.0, read_timeout=2.0)
    await producer.ping()
    conn = producer._conn
    await asyncio.sleep(3.5)  # nsqd drops clients silent for two heartbeat intervals
    assert producer.is_connected and producer._conn is conn
    await producer.publish("prod_hb", b"alive")
    assert producer._conn is conn
    await producer.stop()


async def test_stop_waits_for_outstanding_publishes_then_refuses(nsqd: ServerProcess) -> None:
    producer = Producer(nsqd.nsqd)
    futures = [producer.publish_async("prod_stop", b"%d" % i) for i in range(200)]
    await producer.stop()
    await asyncio.gather(*futures)
    assert not producer.is_connected
    with pytest.raises(StoppedError):
        await producer.publish("prod_stop", b"late")
    with pytest.raises(StoppedError):
        await producer.ping()
    await producer.stop()  # idempotent


async def test_unreachable_and_wrong_port_errors_are_clear(nsqd: ServerProcess) -> None:
    nobody = Producer(f"127.0.0.1:{free_port()}")
    with pytest.raises(NotConnectedError):
        await nobody.publish("t", b"x")
    with pytest.raises(NotConnectedError):
        await nobody.ping()
    http = Producer(nsqd.nsqd_http)
    with pytest.raises(NSQClientError, match="HTTP"):
        await http.publish("t", b"x")


async def test_producer_reconnects_after_nsqd_restart(tmp_path: Path) -> None:
    proc = ServerProcess(tmp_path / "d", command="nsqd").start()
    try:
        producer = Producer(proc.nsqd)
        await producer.publish("prod_restart", b"before")
        proc.stop()
        with pytest.raises(NotConnectedError):
            await producer.publish("prod_restart", b"while down")
        proc.start()
        await producer.publish("prod_restart", b"after")
        sub = await RawNsq.open(proc.nsqd)
        await sub.sub("prod_restart", "ch", rdy=10)
        assert sorted(await drain(sub, 2)) == [b"after", b"before"]
        sub.close()
        await producer.stop()
    finally:
        proc.stop()


def test_blocking_producer(nsqd: ServerProcess) -> None:
    with BlockingProducer(nsqd.nsqd) as producer:
        producer.ping()
        producer.publish("prod_block", b"one")
        producer.multi_publish("prod_block", [b"two", b"three"])
        producer.deferred_publish("prod_block", 0.1, b"four")
        producer.publish_async("prod_block", b"five").result(10)
        with pytest.raises(ProtocolError):
            producer.publish("bad!topic", b"x")

    async def check() -> None:
        sub = await RawNsq.open(nsqd.nsqd)
        await sub.sub("prod_block", "ch", rdy=10)
        assert sorted(await drain(sub, 5)) == [b"five", b"four", b"one", b"three", b"two"]
        sub.close()

    run(check())
    with pytest.raises(StoppedError):
        producer.publish("prod_block", b"after stop")
