"""send_async's fast path (client/fast_send.py): no task per send, the same results, errors, callbacks and
retries as ``send``."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from tests.support import RawClient, ServerProcess, TwoBrokers
from tidemq.client.instance import MQClientError
from tidemq.client.message import Message, SendResult, SendStatus
from tidemq.client.producer import Producer


@pytest.mark.e2e
async def test_a_broker_killed_mid_stream_every_send_async_resolves_on_the_other(
    two_brokers: TwoBrokers,
) -> None:
    """Sends already written to a broker that is then killed fail there and are retried on the other
    broker, as ``send`` retries them: every future resolves, and all land on the live broker."""
    namesrv, brokers = two_brokers.namesrv, two_brokers.brokers
    for b in brokers:
        c = await RawClient.open(b.broker)
        await c.create_topic("FastFailover", 2)
        c.close()
    async with Producer("PGFast", namesrv.namesrv, send_timeout=15) as producer:
        warm = {
            (await producer.send(Message("FastFailover", b"w"))).message_queue.broker_name for _ in range(8)
        }
        assert warm == {"broker-0", "broker-1"}, "both connections open, the route known"
        before = [producer.send_async(Message("FastFailover", b"x")) for _ in range(200)]
        assert not any(isinstance(f, asyncio.Task) for f in before), "the fast path took them"
        brokers[0].kill()  # before this loop pass writes them: broker-0's half can only fail
        after = [producer.send_async(Message("FastFailover", b"y")) for _ in range(100)]
        results = await asyncio.wait_for(asyncio.gather(*before, *after, return_exceptions=True), 60)
    assert all(isinstance(r, SendResult) and r.status is SendStatus.SEND_OK for r in results), results
    assert {r.message_queue.broker_name for r in results if isinstance(r, SendResult)} == {"broker-1"}


@pytest.mark.e2e
async def test_fast_send_async_gives_the_callback_and_future_what_send_gives(
    fresh_server: ServerProcess,
) -> None:
    """A result, a timeout ("ran out of time", as ``send`` says it) and a cancelled future that leaves
    the connection working."""
    got: list[tuple[SendResult | None, BaseException | None]] = []
    async with Producer("PGFastParity", fresh_server.namesrv) as producer:
        await producer.send(Message("FastParity", b"route and connection first"))
        fut = producer.send_async(Message("FastParity", b"ok"), lambda r, e: got.append((r, e)))
        assert not isinstance(fut, asyncio.Task)
        result = await fut
        assert result.status is SendStatus.SEND_OK and result.message_queue.topic == "FastParity"
        assert got == [(result, None)]

        cancelled = producer.send_async(Message("FastParity", b"cancelled"), lambda r, e: got.append((r, e)))
        cancelled.cancel()
        await asyncio.sleep(0.3)  # its answer arrives and is dropped
        assert isinstance(got[-1][1], asyncio.CancelledError)
        assert (await producer.send_async(Message("FastParity", b"again"))).status is SendStatus.SEND_OK

        assert fresh_server.proc is not None
        os.kill(fresh_server.proc.pid, signal.SIGSTOP)  # the broker takes the request, never answers
        try:
            frozen = producer.send_async(
                Message("FastParity", b"x"), lambda r, e: got.append((r, e)), timeout=1.0
            )
            assert not isinstance(frozen, asyncio.Task)
            with pytest.raises(MQClientError) as caught:
                await asyncio.wait_for(frozen, 20)
        finally:
            os.kill(fresh_server.proc.pid, signal.SIGCONT)
    assert "ran out of time" in str(caught.value) and "1 s send timeout" in str(caught.value)
    assert got[-1] == (None, caught.value)
