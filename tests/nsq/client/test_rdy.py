"""The consumer's RDY distribution and backoff rules, on stand-in connections (no nsqd, no sockets)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from tests.support import eventually
from tidemq.nsq.client.config import Config
from tidemq.nsq.client.conn import NsqdConn
from tidemq.nsq.client.rdy import RdyController, Signal


class FakeConn:
    """The fields and the one method of ``NsqdConn`` that RDY bookkeeping touches; records RDY commands."""

    def __init__(self, addr: str, max_rdy_count: int = 2500) -> None:
        self.addr = addr
        self.max_rdy_count = max_rdy_count
        self.rdy = 0
        self.closing = False
        self.is_closed = False
        self.last_msg_time = asyncio.get_running_loop().time()
        self.last_rdy_time = 0.0
        self.sent: list[int] = []

    def send(self, data: bytes) -> None:
        command, count = data.split()
        assert command == b"RDY"
        self.sent.append(int(count))


def controller(conns: list[FakeConn], **config: Any) -> RdyController:
    return RdyController(Config(**config), lambda: cast(list[NsqdConn], conns), stopping=lambda: False)


def rdy(conn: FakeConn) -> NsqdConn:
    return cast(NsqdConn, conn)


async def test_each_connection_gets_its_share_of_max_in_flight_at_least_one() -> None:
    a, b, c = FakeConn("a"), FakeConn("b"), FakeConn("c")
    assert controller([a, b, c], max_in_flight=10).per_conn_max_in_flight() == 3
    assert controller([], max_in_flight=10).per_conn_max_in_flight() == 10
    assert controller([a, b, c], max_in_flight=2).per_conn_max_in_flight() == 1


async def test_the_sum_of_rdy_never_passes_max_in_flight() -> None:
    a, b = FakeConn("a"), FakeConn("b")
    ctl = controller([a, b], max_in_flight=10)
    assert ctl.update(rdy(a), 6)
    assert ctl.update(rdy(b), 6), "clipped to what is left, not refused"
    assert (a.sent, b.sent, ctl.total_rdy) == ([6], [4], 10)
    ctl.close()


async def test_no_room_for_a_connection_at_rdy_0_means_a_retry_later() -> None:
    a, b = FakeConn("a"), FakeConn("b")
    ctl = controller([a, b], max_in_flight=2)
    assert ctl.update(rdy(a), 2)
    assert not ctl.update(rdy(b), 1)
    assert b.sent == [] and b.rdy == 0 and ctl.total_rdy == 2
    assert rdy(b) in ctl._retry, "a retry is scheduled so the connection is not starved forever"
    ctl.close()
    assert not ctl._retry


async def test_lowering_max_in_flight_lowers_every_window() -> None:
    a, b = FakeConn("a"), FakeConn("b")
    ctl = controller([a, b], max_in_flight=10)
    ctl.update(rdy(a), 6)
    ctl.update(rdy(b), 4)
    ctl.change_max_in_flight(4)
    assert (a.rdy, b.rdy, ctl.total_rdy) == (2, 2, 4)
    assert a.sent == [6, 2] and b.sent == [4, 2]
    ctl.close()


async def test_rdy_is_capped_by_nsqd_and_not_resent_or_sent_to_a_closing_connection() -> None:
    a, b = FakeConn("a", max_rdy_count=5), FakeConn("b")
    ctl = controller([a, b], max_in_flight=100)
    assert ctl.update(rdy(a), 50)
    assert ctl.update(rdy(a), 50)
    assert a.sent == [5] and a.rdy == 5, "nsqd's max_rdy_count caps it, and the same RDY is not sent twice"
    b.closing = True
    assert not ctl.update(rdy(b), 1)
    assert b.sent == []
    ctl.on_conn_closed(rdy(a), remaining=1)
    assert a.rdy == 0 and ctl.total_rdy == 0
    ctl.close()


async def test_backoff_sets_rdy_0_everywhere_then_lets_one_message_through() -> None:
    a, b = FakeConn("a"), FakeConn("b")
    ctl = controller([a, b], max_in_flight=4, backoff_multiplier=0.01)
    ctl.maybe_update(rdy(a))
    ctl.maybe_update(rdy(b))
    assert (a.rdy, b.rdy) == (2, 2)
    ctl.signal(Signal.BACKOFF)
    assert ctl.in_backoff and ctl.in_backoff_timeout
    assert (a.rdy, b.rdy, ctl.total_rdy) == (0, 0, 0)
    ctl.maybe_update(rdy(a))
    assert a.rdy == 0, "no RDY while backing off"
    ctl.signal(Signal.RESUME)
    assert ctl.backoff_counter == 1, "results during the backoff window are ignored"
    await eventually(lambda: not ctl.in_backoff_timeout, timeout=5.0, what="the backoff window over")
    assert sorted((a.rdy, b.rdy)) == [0, 1], "one connection tests the water with RDY 1"
    ctl.signal(Signal.RESUME)
    assert not ctl.in_backoff and (a.rdy, b.rdy) == (2, 2), "a success leaves backoff: everyone's share"
    ctl.close()


async def test_continue_neither_backs_off_nor_resumes() -> None:
    a = FakeConn("a")
    ctl = controller([a], max_in_flight=3)
    ctl.maybe_update(rdy(a))
    ctl.signal(Signal.CONTINUE)
    assert not ctl.in_backoff and a.sent == [3]
    ctl.close()


async def test_redistribution_rotates_single_credits_when_connections_outnumber_them() -> None:
    conns = [FakeConn(f"c{i}") for i in range(3)]
    ctl = controller(conns, max_in_flight=1)
    ctl.rng.seed(7)
    ctl.redistribute()
    assert sorted(c.rdy for c in conns) == [0, 0, 1] and ctl.total_rdy == 1
    holder = next(c for c in conns if c.rdy == 1)
    holder.last_msg_time -= Config().low_rdy_idle_timeout + 1  # idle: it must give its credit up
    ctl.redistribute()
    assert 0 in holder.sent, "the idle connection's credit was taken back before it was handed out again"
    assert sum(c.rdy for c in conns) == 1 == ctl.total_rdy
    ctl.close()
