"""An nsqd connection's lifecycle: the transition table, and the connection following it without a socket."""

from __future__ import annotations

import asyncio

import pytest

from tests.nsq.nsqd.connection_support import Transport, fake_nsqd
from tidemq.nsq.nsqd.connection import NsqConnection
from tidemq.nsq.nsqd.lifecycle import TRANSITIONS, Event, Lifecycle, Writer
from tidemq.nsq.nsqd.verbs import State
from tidemq.nsq.protocol import MAGIC_V2, FrameType, encode_frame

L, E = Lifecycle, Event
advance = TRANSITIONS.advance


def test_held_output_defers_the_close_until_it_is_written() -> None:
    state = L.OPEN
    for event, expected in (
        (E.CLOSE_HELD, L.CLOSE_PENDING),
        (E.CLOSE_HELD, L.CLOSE_PENDING),
        (E.RELEASED, L.CLOSED),
    ):
        state = advance(state, event)
        assert state is expected


def test_closing_without_held_output_or_a_lost_socket_closes_from_anywhere() -> None:
    for state in Lifecycle:
        assert advance(state, E.CLOSE) is L.CLOSED
        assert advance(state, E.LOST) is L.CLOSED


def test_closed_is_final() -> None:
    for event in Event:
        if (L.CLOSED, event) in TRANSITIONS:
            assert advance(L.CLOSED, event) is L.CLOSED
    assert not any(target is L.OPEN for target in TRANSITIONS.values())


def test_released_means_nothing_while_open() -> None:
    """Held output is written all the time while open; only a pending close waits for it."""
    with pytest.raises(RuntimeError, match="nsqd connection: held output written while open"):
        advance(L.OPEN, E.RELEASED)


def test_the_protocol_state_and_the_lifecycle_are_separate() -> None:
    assert not {s.name for s in State} & {s.name for s in Lifecycle}
    assert {w.name for w in Writer} == {"WRITING", "AWAITING_FSYNC"}


def connection() -> tuple[NsqConnection, Transport]:
    conn = NsqConnection(fake_nsqd())
    transport = Transport()
    conn.transport = transport  # type: ignore[assignment]
    return conn, transport


def test_a_fatal_error_closes_the_connection() -> None:
    async def run() -> None:
        conn, transport = connection()
        conn.data_received(memoryview(MAGIC_V2 + b"RDY 1\n"))  # RDY before SUB: fatal
        for _ in range(3):
            await asyncio.sleep(0)
        assert conn.lifecycle is L.CLOSED and transport.closed
        assert transport.data == encode_frame(FrameType.ERROR, b"E_INVALID cannot RDY in current state")
        assert not conn.receiving
        conn.connection_lost(None)
        assert conn.lifecycle is L.CLOSED

    asyncio.run(run())


def test_output_held_behind_a_fin_closes_the_socket_once_written() -> None:
    async def run() -> None:
        conn, transport = connection()
        conn.state = State.SUBSCRIBED
        assert conn.receiving
        conn.output.fin_gate = 5  # a FIN at journal position 5 is not durable yet: output waits for it
        conn.send_response(b"late")
        conn.close()
        assert conn.lifecycle is L.CLOSE_PENDING
        assert not transport.closed and transport.data == b""
        assert not conn.receiving
        assert conn.output.fins_durable(5)
        assert conn.lifecycle is L.CLOSED
        assert transport.closed and transport.data == encode_frame(FrameType.RESPONSE, b"late")

    asyncio.run(run())
