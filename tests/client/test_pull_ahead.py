"""Pulling ahead: the next pull goes on the wire before the previous answer is decoded, within flow control.

``start_invoke`` is tested against a real ``RemotingServer`` on 127.0.0.1; the pull-ahead decision against
a real (not started) push consumer and process queue; the whole loop against a real ``tidemq server``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from tests.consumer_support import Collector, consumer, produce
from tests.support import ServerProcess, create_topic, eventually
from tidemq.client import api
from tidemq.client.consumer import ConsumeFromWhere, PushConsumer
from tidemq.client.consumer.process_queue import ProcessQueue
from tidemq.client.consumer.pulling import _PullRequest
from tidemq.client.message_queue import MessageQueue
from tidemq.record import MessageExt
from tidemq.remoting.codes import ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.transport import (
    ProcessorResult,
    RemotingConnection,
    RemotingServer,
    RemotingTimeoutError,
    connect,
)


class _ThreadServer:
    """A ``RemotingServer`` on its own loop in a thread, so it answers while the test's loop is blocked."""

    def __init__(self) -> None:
        self.arrived: list[tuple[int, float]] = []
        self.port = 0
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def handler(self, conn: RemotingConnection, req: RemotingCommand) -> ProcessorResult:
        self.arrived.append((req.code, time.monotonic()))
        if req.code == 2:
            return None  # never answered
        return req.response(ResponseCode.SUCCESS, remark=f"answer {req.code}")

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = RemotingServer(self.handler, "127.0.0.1", 0)
        await server.start()
        self.port = server.port
        self._ready.set()
        await self._stop.wait()
        await server.close()

    def __enter__(self) -> _ThreadServer:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


@pytest.fixture
def peer() -> Iterator[_ThreadServer]:
    """A remoting peer on its own loop in a thread, so this test's loop can be blocked while it answers."""
    with _ThreadServer() as server:
        yield server


async def test_start_invoke_writes_before_the_caller_waits_and_answer_times_out(peer: _ThreadServer) -> None:
    conn = await connect("127.0.0.1", peer.port)
    try:
        request = RemotingCommand(1)
        pending = conn.start_invoke(request)
        await asyncio.sleep(0)  # one loop pass: the write goes out, nobody waits on the answer yet
        blocked_until = time.monotonic() + 0.2
        time.sleep(0.2)  # the caller's slow work, with this loop blocked
        took = await conn.answer(request, pending, 3.0)
        assert took.remark == "answer 1"
        assert peer.arrived[0][1] < blocked_until, "the request reached the server during the work"

        silent = RemotingCommand(2)
        waiting = conn.start_invoke(silent)
        with pytest.raises(RemotingTimeoutError):
            await conn.answer(silent, waiting, 0.2)
        assert silent.opaque not in conn._pending, "a timed-out request leaves nothing behind"
    finally:
        conn.close()


async def test_each_request_times_out_by_its_own_deadline_whatever_the_order(peer: _ThreadServer) -> None:
    """Deadlines live in the connection's table under one timer: a shorter timeout issued after a longer
    one still fires first, answered requests leave the table, and the longer one fires in its turn."""

    conn = await connect("127.0.0.1", peer.port)
    try:
        slow, quick, answered = RemotingCommand(2), RemotingCommand(2), RemotingCommand(1)
        slow_wait = asyncio.ensure_future(conn.answer(slow, conn.start_invoke(slow), 1.0))
        await asyncio.sleep(0)
        assert (await conn.answer(answered, conn.start_invoke(answered), 5.0)).remark == "answer 1"
        with pytest.raises(RemotingTimeoutError, match=r"within 0\.2s"):
            await conn.answer(quick, conn.start_invoke(quick), 0.2)
        assert not slow_wait.done(), "the longer timeout is still running"
        assert list(conn._deadlines) == [slow.opaque]
        with pytest.raises(RemotingTimeoutError, match=r"within 1\.0s"):
            await slow_wait
        assert not conn._deadlines and not conn._pending
        assert conn._expiry is None, "no timer stays armed with nothing to wait for"
    finally:
        conn.close()


def _answer(next_offset: int, body: bytes = b"") -> api.PullResult:
    return api.PullResult(ResponseCode.SUCCESS, next_offset, 0, 1000, body, 0)


async def test_pull_ahead_only_within_flow_control() -> None:
    c = PushConsumer("AheadGroup", "127.0.0.1:1", pull_threshold_for_queue=40).core
    c.pull_threshold_size_for_queue = 64 * 1024
    c.consume_concurrently_max_span = 100
    pq = ProcessQueue()
    request = _PullRequest(c, MessageQueue("T", "b", 0), pq, 0)

    assert request.may_pull_ahead(_answer(32, b"x" * 1000))
    assert not request.may_pull_ahead(_answer(41)), "41 arriving would pass the count threshold"
    assert not request.may_pull_ahead(_answer(8, b"x" * (64 * 1024 + 1))), "size threshold"

    pq.put([MessageExt("T", b"x", queue_offset=o) for o in (0, 90)])  # span 90, 2 cached
    request.next_offset = 91
    assert request.may_pull_ahead(_answer(101))
    assert not request.may_pull_ahead(_answer(102)), "span 90 + 11 > 100"

    c.paused = True
    assert not request.may_pull_ahead(_answer(92)), "a paused consumer does not pull ahead"
    c.paused = False
    c.orderly = True
    assert not request.may_pull_ahead(_answer(92)), "orderly consumers pull one at a time"


@pytest.mark.e2e
async def test_pull_ahead_delivers_everything_once_in_queue_order(server: ServerProcess) -> None:
    """Answers decoded while the next pull is already out: nothing lost, nothing twice, offsets in order."""

    await create_topic(server.broker, "Ahead", 2)
    await produce(server.namesrv, "Ahead", 600)
    got = Collector()
    c = consumer(
        server.namesrv,
        "AheadOrder",
        "Ahead",
        got,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        pull_batch_size=8,
        consume_thread_max=1,
    )
    await c.start()
    await eventually(lambda: len(got.distinct()) == 600, what="600 messages", timeout=20.0)
    await c.shutdown()
    assert got.duplicates() == {}
    for queue_id in (0, 1):
        offsets = [m.queue_offset for m in got.deliveries if m.queue_id == queue_id]
        assert offsets == list(range(len(offsets))), f"queue {queue_id} delivered out of order"
