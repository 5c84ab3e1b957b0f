"""nsqd's TCP protocol against a real ``tidemq server``: commands, RDY, FIN/REQ/TOUCH, errors."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.nsq_support import RawNsq
from tests.support import ServerProcess
from tidemq.nsq.protocol import FrameType

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def nsq_server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    proc = ServerProcess(tmp_path_factory.mktemp("nsq") / "data", "--msg-timeout", "1000").start()
    yield proc
    proc.stop()


async def test_pub_sub_fin_round_trip(nsq_server: ServerProcess) -> None:
    pub = await RawNsq.open(nsq_server.nsqd)
    info = await pub.identify(client_id="pub")
    assert info["max_rdy_count"] == 2500 and info["version"] == "1.3.0" and info["auth_required"] is False
    sub = await RawNsq.open(nsq_server.nsqd)
    await sub.identify(client_id="sub")
    await sub.sub("rt", "ch", rdy=10)
    before = time.time_ns()
    assert await pub.pub("rt", b"hello") == b"OK"
    assert await pub.mpub("rt", [b"a", b"b", b"c"]) == b"OK"
    msgs = [await sub.message() for _ in range(4)]
    assert [m.body for m in msgs] == [b"hello", b"a", b"b", b"c"]
    assert all(m.attempts == 1 and len(m.id) == 16 for m in msgs)
    assert msgs[0].timestamp >= before
    for m in msgs:
        sub.send("FIN", m.id)
    sub.send("FIN", msgs[0].id)  # already finished: non-fatal error
    err = await sub.error()
    assert err.startswith(b"E_FIN_FAILED") and b"not in flight" in err
    sub.send("NOP")
    assert await pub.pub("rt", b"still open") == b"OK"
    assert (await sub.message()).body == b"still open"
    pub.close()
    sub.close()


async def test_rdy_bounds_unacknowledged_messages(nsq_server: ServerProcess) -> None:
    pub = await RawNsq.open(nsq_server.nsqd)
    sub = await RawNsq.open(nsq_server.nsqd)
    await sub.sub("rdy", "ch", rdy=3)
    await pub.mpub("rdy", [f"{i}".encode() for i in range(10)])
    first = [await sub.message() for _ in range(3)]
    with pytest.raises(TimeoutError):
        await sub.message(timeout=0.4)  # RDY 3 means at most 3 unacknowledged
    sub.send("FIN", first[0].id)
    assert (await sub.message()).body == b"3"
    sub.send("RDY", "0")
    sub.send("FIN", first[1].id)
    with pytest.raises(TimeoutError):
        await sub.message(timeout=0.4)
    pub.close()
    sub.close()


async def test_req_delay_timeout_redelivery_and_touch(nsq_server: ServerProcess) -> None:
    pub = await RawNsq.open(nsq_server.nsqd)
    sub = await RawNsq.open(nsq_server.nsqd)
    await sub.sub("redo", "ch", rdy=5)
    await pub.pub("redo", b"x")
    m = await sub.message()
    sub.send("REQ", m.id, "300")
    t0 = time.monotonic()
    again = await sub.message()
    assert again.id == m.id and again.attempts == 2 and time.monotonic() - t0 >= 0.25
    t0 = time.monotonic()  # no FIN: the 1 s msg timeout redelivers it
    third = await sub.message(timeout=5)
    assert third.attempts == 3 and 0.9 <= time.monotonic() - t0 < 3
    for _ in range(3):  # TOUCH keeps it in flight past its timeout
        await asyncio.sleep(0.6)
        sub.send("TOUCH", third.id)
    with pytest.raises(TimeoutError):
        await sub.message(timeout=0.3)
    sub.send("FIN", third.id)
    sub.send("REQ", third.id, "0")
    assert (await sub.error()).startswith(b"E_REQ_FAILED")
    pub.close()
    sub.close()


async def test_touch_keeps_one_message_of_a_write_in_flight_while_the_rest_time_out(
    nsq_server: ServerProcess,
) -> None:
    """Messages sent in one write share their timeout until a TOUCH gives one a deadline of its own."""

    pub = await RawNsq.open(nsq_server.nsqd)
    sub = await RawNsq.open(nsq_server.nsqd)
    await sub.sub("shared", "ch", rdy=3)
    await pub.mpub("shared", [b"a", b"b", b"c"])
    first = [await sub.message() for _ in range(3)]
    touched = next(m for m in first if m.body == b"b")
    for _ in range(4):  # past the 1 s timeout of the other two, which a shared deadline would stretch
        await asyncio.sleep(0.35)
        sub.send("TOUCH", touched.id)
    again = sorted([await sub.message(timeout=0.3), await sub.message(timeout=0.3)], key=lambda m: m.body)
    assert [(m.body, m.attempts) for m in again] == [(b"a", 2), (b"c", 2)]
    sub.send("FIN", touched.id)
    for m in again:
        sub.send("FIN", m.id)
    with pytest.raises(TimeoutError):
        await sub.message(timeout=1.5)  # the touched one was finished, not redelivered
    pub.close()
    sub.close()


async def test_dpub_defers_delivery(nsq_server: ServerProcess) -> None:
    pub = await RawNsq.open(nsq_server.nsqd)
    sub = await RawNsq.open(nsq_server.nsqd)
    await sub.sub("later", "ch", rdy=5)
    pub.send("DPUB", "later", "700", body=b"deferred")
    assert await pub.response() == b"OK"
    t0 = time.monotonic()
    await pub.pub("later", b"now")
    assert (await sub.message()).body == b"now"
    m = await sub.message(timeout=3)
    assert m.body == b"deferred" and time.monotonic() - t0 >= 0.6
    pub.close()
    sub.close()


async def test_channels_each_get_every_message_and_share_within(nsq_server: ServerProcess) -> None:
    pub = await RawNsq.open(nsq_server.nsqd)
    a1, a2, b = [await RawNsq.open(nsq_server.nsqd) for _ in range(3)]
    await a1.sub("fan", "a", rdy=100)
    await a2.sub("fan", "a", rdy=100)
    await b.sub("fan", "b", rdy=100)
    await pub.mpub("fan", [f"{i}".encode() for i in range(20)])
    got_b = [await b.message() for _ in range(20)]
    assert sorted(int(m.body) for m in got_b) == list(range(20))
    got_a: list[bytes] = []
    for client in (a1, a2):
        try:
            while True:
                msg = await client.message(timeout=0.5)
                client.send("FIN", msg.id)  # unfinished, it would time out and come again
                got_a.append(msg.body)
        except TimeoutError:
            pass
    assert sorted(int(x) for x in got_a) == list(range(20)), "a channel splits its messages among clients"
    for c in (pub, a1, a2, b):
        c.close()


async def test_cls_and_fatal_errors(nsq_server: ServerProcess) -> None:
    sub = await RawNsq.open(nsq_server.nsqd)
    await sub.sub("cls", "ch", rdy=1)
    sub.send("CLS")
    assert await sub.response() == b"CLOSE_WAIT"
    sub.close()
    cases = [
        (b"BOGUS\n", b"E_INVALID invalid command BOGUS"),
        (b"RDY 5\n", b"E_INVALID cannot RDY in current state"),
        (b"SUB bad!topic ch\n", b"E_BAD_TOPIC"),
        (b"SUB ok bad!ch\n", b"E_BAD_CHANNEL"),
        (b"PUB t\n" + (0).to_bytes(4, "big"), b"E_BAD_MESSAGE"),
        (b"PUB t\n" + (2**30).to_bytes(4, "big"), b"E_BAD_MESSAGE"),
        (b"DPUB t -5\n" + (1).to_bytes(4, "big") + b"x", b"E_INVALID"),
        (b"IDENTIFY\n" + (5).to_bytes(4, "big") + b"notjs", b"E_BAD_BODY"),
        (b"AUTH\n" + (3).to_bytes(4, "big") + b"abc", b"E_AUTH_DISABLED"),
        (b"MPUB t\n" + (8).to_bytes(4, "big") + (5).to_bytes(4, "big") + b"\0\0\0\0", b"E_BAD_BODY"),
    ]
    for command, expected in cases:
        c = await RawNsq.open(nsq_server.nsqd)
        c.send_raw(command)
        ftype, data = await c.frame()
        assert ftype == FrameType.ERROR and data.startswith(expected), (command, data)
        assert await c.closed(), f"{command!r} is fatal: the connection closes"
    bad_magic = await RawNsq.open(nsq_server.nsqd, magic=False)
    bad_magic.send_raw(b"  V1")
    assert (await bad_magic.error()).startswith(b"E_BAD_PROTOCOL")
    # after all that, the server still serves others
    ok = await RawNsq.open(nsq_server.nsqd)
    assert await ok.pub("cls", b"fine") == b"OK"
    ok.close()


async def test_a_lagging_channel_reads_past_its_memory_queue_from_the_store(tmp_path: Path) -> None:
    """A caught-up channel takes new publishes in memory, up to --mem-queue-size waiting; past that, and
    once it catches up again, it reads them from the store: every message once, in publish order."""
    srv = ServerProcess(tmp_path / "d", "--mem-queue-size", "10", command="nsqd").start()

    try:
        sub = await RawNsq.open(srv.nsqd)
        await sub.sub("lag", "ch", rdy=3)
        pub = await RawNsq.open(srv.nsqd)
        assert await pub.pub("lag", b"0") == b"OK"
        assert await pub.mpub("lag", [b"%d" % i for i in range(1, 8)]) == b"OK"  # 7 more: fits in memory
        assert await pub.mpub("lag", [b"%d" % i for i in range(8, 40)]) == b"OK"  # past the memory queue
        assert await pub.pub("lag", b"40") == b"OK"  # fits, but the channel lags: from the store, after 39
        got = []
        for _ in range(41):
            m = await sub.message()
            got.append(int(m.body))
            sub.send("FIN", m.id)
            if len(got) == 20:
                assert await pub.pub("lag", b"41") == b"OK"
        got.append(int((await sub.message()).body))
        assert got == list(range(42))
        sub.close()
        pub.close()
    finally:
        assert srv.stop() == 0


async def test_nothing_is_delivered_to_a_connection_a_fatal_error_closed(nsq_server: ServerProcess) -> None:
    """RDY then a fatal command in one read: the connection closes without taking messages in flight,
    so another subscriber gets them at once, on their first attempt (not after the in-flight timeout)."""

    pub = await RawNsq.open(nsq_server.nsqd)
    assert await pub.mpub("fatalrdy", [b"a", b"b"]) == b"OK"
    sub = await RawNsq.open(nsq_server.nsqd)
    await sub.sub("fatalrdy", "ch")
    sub.send_raw(b"RDY 2\nRDY 99999999\n")
    assert (await sub.error()).startswith(b"E_INVALID")
    assert await sub.closed()
    other = await RawNsq.open(nsq_server.nsqd)
    await other.sub("fatalrdy", "ch", rdy=2)
    msgs = [await other.message(timeout=5) for _ in range(2)]
    assert sorted(m.body for m in msgs) == [b"a", b"b"] and {m.attempts for m in msgs} == {1}
    for p in (pub, other):
        p.close()
