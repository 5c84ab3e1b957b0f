"""A client connection's life: the transition table, and ``NsqdConn`` following it without a socket."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tidemq.nsq.client.config import Config
from tidemq.nsq.client.conn import NsqdConn
from tidemq.nsq.client.conn_state import ENDED, TRANSITIONS, ConnEvent, ConnState, notifies
from tidemq.nsq.protocol import FrameType, Message, encode_frame

S, E = ConnState, ConnEvent
advance = TRANSITIONS.advance


def test_the_way_up() -> None:
    state = S.CONNECTING
    for event, expected in ((E.BOOTSTRAP_DONE, S.BOOTSTRAPPED), (E.GO_LIVE, S.LIVE)):
        state = advance(state, event)
        assert state is expected


def test_a_connection_that_never_bootstrapped_ends_without_on_close() -> None:
    for event in (E.CONNECT_FAILED, E.CLOSE):
        assert advance(S.CONNECTING, event) is S.TORN_DOWN
    # close() while bootstrapping, then connect() notices and raises
    assert advance(S.TORN_DOWN, E.CONNECT_FAILED) is S.TORN_DOWN
    assert not notifies(S.TORN_DOWN, E.TEARDOWN)


def test_close_tells_the_delegate_on_the_teardown_after_it() -> None:
    for state in (S.BOOTSTRAPPED, S.LIVE):
        assert advance(state, E.CLOSE) is S.CLOSED
        assert notifies(state, E.TEARDOWN)
    assert advance(S.CLOSED, E.TEARDOWN) is S.TORN_DOWN
    assert notifies(S.CLOSED, E.TEARDOWN)


def test_on_close_is_heard_once() -> None:
    assert advance(S.TORN_DOWN, E.TEARDOWN) is S.TORN_DOWN
    assert not notifies(S.TORN_DOWN, E.TEARDOWN)
    for state, event in TRANSITIONS:
        assert not notifies(state, event) or event is E.TEARDOWN


def test_ended_states_never_open_again() -> None:
    for (state, _), target in TRANSITIONS.items():
        if state in ENDED:
            assert target in ENDED
    assert {S.CLOSED, S.TORN_DOWN} == ENDED


def test_an_impossible_move_is_a_bug() -> None:
    with pytest.raises(RuntimeError, match="connection to nsqd: go live while connecting"):
        advance(S.CONNECTING, E.GO_LIVE)
    with pytest.raises(RuntimeError):
        advance(S.CLOSED, E.CLOSE)  # close() returns early once closed


def test_every_state_is_reachable() -> None:
    reached = {S.CONNECTING}
    while True:
        more = {target for (state, _), target in TRANSITIONS.items() if state in reached} - reached
        if not more:
            break
        reached |= more
    assert reached == set(ConnState)


class Delegate:
    def __init__(self) -> None:
        self.closes = 0
        self.responses: list[bytes] = []

    def on_message(self, conn: NsqdConn, message: Message) -> None:
        pass

    def on_response(self, conn: NsqdConn, data: bytes) -> None:
        self.responses.append(data)

    def on_error(self, conn: NsqdConn, data: bytes) -> None:
        pass

    def on_close(self, conn: NsqdConn) -> None:
        self.closes += 1


class Transport:
    def __init__(self) -> None:
        self.closed = False

    def write(self, data: Any) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def bootstrapped(delegate: Delegate) -> NsqdConn:
    """A connection as ``connect()`` leaves it (without the read watchdog)."""
    conn = NsqdConn("127.0.0.1:4150", Config(), delegate)
    conn.connection_made(Transport())  # type: ignore[arg-type]
    conn._move(E.BOOTSTRAP_DONE)
    conn._output.held = False
    conn._loop.call_soon(conn._go_live)
    return conn


def test_closed_while_connecting_never_tells_the_delegate() -> None:
    async def run() -> None:
        delegate = Delegate()
        conn = NsqdConn("127.0.0.1:4150", Config(), delegate)
        conn.close()
        await settle()
        assert conn.state is S.TORN_DOWN and conn.is_closed and delegate.closes == 0

    asyncio.run(run())


def test_reads_wait_for_the_pass_that_goes_live() -> None:
    async def run() -> None:
        delegate = Delegate()
        conn = bootstrapped(delegate)
        conn.data_received(memoryview(encode_frame(FrameType.RESPONSE, b"OK")))
        assert conn.state is S.BOOTSTRAPPED and delegate.responses == []
        await settle()
        assert conn.state is S.LIVE and delegate.responses == [b"OK"]

    asyncio.run(run())


def test_close_then_teardown_tells_the_delegate_once() -> None:
    async def run() -> None:
        delegate = Delegate()
        conn = bootstrapped(delegate)
        await settle()
        conn.close()
        assert conn.state is S.CLOSED and conn.is_closed and delegate.closes == 0
        conn.close()
        conn.connection_lost(None)
        await settle()
        assert conn.state is S.TORN_DOWN and delegate.closes == 1

    asyncio.run(run())


def test_a_lost_socket_tears_a_live_connection_down() -> None:
    async def run() -> None:
        delegate = Delegate()
        conn = bootstrapped(delegate)
        await settle()
        conn.connection_lost(None)
        assert conn.state is S.TORN_DOWN and delegate.closes == 1

    asyncio.run(run())


def test_lost_before_going_live_delivers_what_arrived_then_tears_down() -> None:
    async def run() -> None:
        delegate = Delegate()
        conn = bootstrapped(delegate)
        conn.data_received(memoryview(encode_frame(FrameType.RESPONSE, b"OK")))
        conn.connection_lost(None)
        assert conn.state is S.BOOTSTRAPPED
        await settle()
        assert delegate.responses == [b"OK"]
        assert conn.state is S.TORN_DOWN and delegate.closes == 1

    asyncio.run(run())
