"""Invalid input to the nsqd-compatible server: the exact error frame nsqd v1.3.0 sends, and nothing breaks.

Every case of ``tests/nsqd_error_cases.py`` runs on its own connection against a real ``tidemq nsqd``.
Three tests per case: the error code and its fatality (fatal: the frame, then EOF with nothing else;
non-fatal: the connection keeps working), plus after each fatal case a second healthy connection that
publishes and consumes; nsqd's exact description text; and, for input nsqd accepts, that it is accepted.
Scenario tests below the table cover what needs several connections or the HTTP stats: ownership of
in-flight messages, --max-channel-consumers, REQ clamping, ephemeral topics and channels, sample_rate,
and a consumer that stops reading.

"""

from __future__ import annotations

import asyncio
import itertools
import socket
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from tests.nsq_support import RawNsq
from tests.nsqd_error_cases import (
    ACCEPTED,
    CASES,
    LIMITS_ARGS,
    MAX_RDY,
    MAX_REQ_MS,
    MEM_QUEUE,
    Accepted,
    Case,
    Setup,
    element,
    identify,
    mpub,
    size,
)
from tests.support import ServerProcess, eventually
from tidemq.nsq.protocol import MAGIC_V2, FrameType

pytestmark = pytest.mark.e2e

ROOMY_CONSUMERS = 2
ROOMY_MSG_TIMEOUT_MS = 2000
_serial = itertools.count()


@pytest.fixture(scope="module")
def limits(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Small limits, so every bound is cheap to cross (see ``LIMITS_ARGS``)."""
    proc = ServerProcess(tmp_path_factory.mktemp("nsqd-limits") / "data", *LIMITS_ARGS, command="nsqd")
    yield proc.start()
    proc.stop()


@pytest.fixture(scope="module")
def roomy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Default sizes (big messages fit), two consumers per channel at most, a short msg timeout."""
    proc = ServerProcess(
        tmp_path_factory.mktemp("nsqd-roomy") / "data",
        "--max-channel-consumers",
        str(ROOMY_CONSUMERS),
        "--msg-timeout",
        str(ROOMY_MSG_TIMEOUT_MS),
        command="nsqd",
    )
    yield proc.start()
    proc.stop()


# --- helpers ------------------------------------------------------------------------------------------


async def open_in(addr: str, setup: Setup) -> RawNsq:
    """A connection brought into ``setup``'s state (a subscription is to a fresh ephemeral channel)."""
    if setup is Setup.RAW:
        return await RawNsq.open(addr, magic=False)
    conn = await RawNsq.open(addr)
    if setup is Setup.HB_OFF:
        conn.send_raw(identify({"heartbeat_interval": -1}))
        assert await conn.response() == b"OK"
    if setup in (Setup.SUBSCRIBED, Setup.CLOSING):
        await conn.sub("errs", f"c{next(_serial)}#ephemeral")
    if setup is Setup.CLOSING:
        conn.send("CLS")
        assert await conn.response() == b"CLOSE_WAIT"
    return conn


async def next_error(conn: RawNsq, timeout: float = 5.0) -> bytes:
    ftype, data = await conn.frame(timeout)
    assert ftype == FrameType.ERROR, f"expected an error frame, got type {ftype}: {data[:200]!r}"
    return data


async def assert_closed(conn: RawNsq, timeout: float = 5.0) -> None:
    """After a fatal error: no further frame (heartbeats aside), then the server closes the socket."""
    try:
        ftype, data = await conn.frame(timeout)
    except ConnectionError:
        return
    except TimeoutError:
        raise AssertionError(f"connection still open {timeout} s after a fatal error") from None
    raise AssertionError(f"frame after a fatal error: type {ftype}: {data[:200]!r}")


async def assert_usable(conn: RawNsq) -> None:
    """The connection still answers: NOP (no reply), then a PUB whose reply must be the next frame."""
    conn.send("NOP")
    assert await conn.pub("usable", b"still here") == b"OK"


async def assert_healthy(addr: str) -> None:
    """A fresh pair of connections still publishes and consumes."""
    n = next(_serial)
    sub = await RawNsq.open(addr)
    pub = await RawNsq.open(addr)
    try:
        await sub.sub("healthy", f"probe{n}#ephemeral", rdy=1)
        payload = f"alive {n}".encode()
        assert await pub.pub("healthy", payload) == b"OK"
        msg = await sub.message(timeout=10)
        assert msg.body == payload
        sub.send("FIN", msg.id)
        assert await sub.pub("healthy_ack", b"x") == b"OK"  # the FIN drew no error
    finally:
        sub.close()
        pub.close()


def stats(server: ServerProcess, topic: str | None = None) -> dict[str, Any]:
    url = f"http://{server.nsqd_http}/stats?format=json"
    if topic is not None:
        url += "&topic=" + urllib.parse.quote(topic, safe="")
    with urllib.request.urlopen(url, timeout=10) as resp:
        return orjson.loads(resp.read())  # type: ignore[no-any-return]


def channels_of(server: ServerProcess, topic: str) -> dict[str, dict[str, Any]] | None:
    """``{channel name: channel stats}`` of ``topic``, or None when the topic does not exist."""
    for t in stats(server, topic)["topics"] or []:
        if t["topic_name"] == topic:
            return {c["channel_name"]: c for c in t["channels"]}
    return None


# --- the table: code and fatality, description, accepted input --------------------------------------------


async def check_error(nsqd: str, case: Case, *, payload: bool = False) -> None:
    """``case.send`` is answered with ``case.code`` (and, with ``payload``, its exact text), then the
    connection is closed if the error is fatal and still usable if not."""
    conn = await open_in(nsqd, case.setup)
    try:
        conn.send_raw(case.send)
        data = await next_error(conn)
        assert data.split(b" ", 1)[0] == case.code.encode(), data
        if payload and case.payload is not None:
            assert data == case.payload
        if case.fatal:
            await assert_closed(conn)
        else:
            await assert_usable(conn)
    finally:
        conn.close()


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
async def test_error_code_and_fatality(limits: ServerProcess, case: Case) -> None:
    await check_error(limits.nsqd, case)
    if case.fatal:
        await assert_healthy(limits.nsqd)


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=c.id) for c in CASES if c.payload is not None],
)
async def test_error_description(limits: ServerProcess, case: Case) -> None:
    conn = await open_in(limits.nsqd, case.setup)
    try:
        conn.send_raw(case.send)
        assert await next_error(conn) == case.payload
    finally:
        conn.close()


def test_table_is_consistent() -> None:
    ids = [c.id for c in CASES] + [a.id for a in ACCEPTED]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    non_fatal = {c.code for c in CASES if not c.fatal}
    assert non_fatal == {"E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED"}
    assert all(c.fatal for c in CASES if c.code not in non_fatal)


async def check_accepted(nsqd: str, acc: Accepted) -> None:
    """``acc.send`` is answered with exactly ``acc.responses`` and the connection stays usable."""
    conn = await open_in(nsqd, acc.setup)
    try:
        conn.send_raw(acc.send)
        for expected in acc.responses:
            ftype, data = await conn.frame()
            assert (ftype, data) == (FrameType.RESPONSE, expected)
        await assert_usable(conn)  # an error frame sent for ``acc.send`` would arrive before OK
    finally:
        conn.close()


@pytest.mark.parametrize("acc", [pytest.param(a, id=a.id) for a in ACCEPTED])
async def test_accepted_input(limits: ServerProcess, acc: Accepted) -> None:
    await check_accepted(limits.nsqd, acc)


# --- the command line is judged before any body is read ----------------------------------------------------


LINE_ONLY = [
    (Setup.INIT, b"PUB bad!\n", "E_BAD_TOPIC"),
    (Setup.INIT, b"PUB\n", "E_INVALID"),
    (Setup.INIT, b"MPUB bad!\n", "E_BAD_TOPIC"),
    (Setup.INIT, b"DPUB t x\n", "E_INVALID"),
    (Setup.INIT, f"DPUB t {MAX_REQ_MS + 1}\n".encode(), "E_INVALID"),
    (Setup.INIT, b"AUTH x\n", "E_INVALID"),
    (Setup.SUBSCRIBED, b"IDENTIFY\n", "E_INVALID"),
    (Setup.SUBSCRIBED, b"AUTH\n", "E_INVALID"),
]


async def test_bad_command_line_refused_before_body(limits: ServerProcess) -> None:
    async def one(setup: Setup, line: bytes, code: str) -> str | None:
        conn = await open_in(limits.nsqd, setup)
        try:
            conn.send_raw(line)  # no size, no body
            data = await next_error(conn, timeout=3.0)
            if not data.startswith(code.encode() + b" "):
                return f"{line!r}: {data!r}"
            await assert_closed(conn)
            return None
        except (AssertionError, TimeoutError) as exc:
            return f"{line!r}: {exc!r}"
        finally:
            conn.close()

    problems = await asyncio.gather(*(one(*case) for case in LINE_ONLY))
    assert not [p for p in problems if p], problems


async def test_overlong_line_closes_connection(limits: ServerProcess) -> None:
    conn = await RawNsq.open(limits.nsqd)
    conn.send_raw(b"X" * 20_000)  # no newline within nsqd's 16 KiB line buffer
    try:
        while True:  # whatever frame comes, the connection must end
            await conn.frame(5.0)
    except ConnectionError:
        pass
    finally:
        conn.close()
    await assert_healthy(limits.nsqd)


async def test_overlong_line_closes_without_error_frame(limits: ServerProcess) -> None:
    conn = await RawNsq.open(limits.nsqd)
    try:
        conn.send_raw(b"X" * 20_000)
        await assert_closed(conn)
    finally:
        conn.close()


# --- RDY, REQ and DPUB bounds -------------------------------------------------------------------------


async def test_rdy_without_count_means_one_and_max_is_allowed(limits: ServerProcess) -> None:
    sub = await RawNsq.open(limits.nsqd)
    pub = await RawNsq.open(limits.nsqd)
    try:
        await sub.sub("rdy_bounds", "c")
        assert await pub.mpub("rdy_bounds", [b"%d" % i for i in range(15)]) == b"OK"
        sub.send("RDY")  # no count: 1
        first = await sub.message(timeout=10)
        with pytest.raises(TimeoutError):
            await sub.message(timeout=0.5)
        sub.send("FIN", first.id)
        sub.send("RDY", str(MAX_RDY))  # exactly --max-rdy-count
        more = [await sub.message(timeout=10) for _ in range(MAX_RDY)]
        with pytest.raises(TimeoutError):
            await sub.message(timeout=0.5)  # RDY 10: at most 10 unacknowledged
        assert len({m.id for m in [first, *more]}) == MAX_RDY + 1
    finally:
        sub.close()
        pub.close()


async def test_req_timeout_above_max_is_clamped_not_fatal(limits: ServerProcess) -> None:
    sub = await RawNsq.open(limits.nsqd)
    pub = await RawNsq.open(limits.nsqd)
    try:
        await sub.sub("req_clamp", "c", rdy=1)
        assert await pub.pub("req_clamp", b"later") == b"OK"
        msg = await sub.message(timeout=10)
        sub.send("REQ", msg.id, str(MAX_REQ_MS * 1000))  # far above --max-req-timeout
        await assert_usable(sub)  # no error frame came first, the connection works
        with pytest.raises(TimeoutError):
            await sub.message(timeout=1.0)  # deferred (by up to an hour), not requeued at once
        channel = await eventually(
            lambda: (channels_of(limits, "req_clamp") or {}).get("c"),
            what="channel in /stats",
            in_thread=True,
        )
        assert channel["deferred_count"] == 1 and channel["requeue_count"] == 1
        assert channel["in_flight_count"] == 0
    finally:
        sub.close()
        pub.close()


async def test_dpub_at_max_accepted_above_max_refused(limits: ServerProcess) -> None:
    conn = await RawNsq.open(limits.nsqd)
    conn.send("DPUB", "dpub_max", str(MAX_REQ_MS), body=b"an hour")
    assert await conn.response() == b"OK"
    conn.send("DPUB", "dpub_max", str(MAX_REQ_MS + 1), body=b"too late")
    assert (
        await next_error(conn)
    ) == f"E_INVALID DPUB timeout {MAX_REQ_MS + 1} out of range 0-{MAX_REQ_MS}".encode()
    await assert_closed(conn)
    conn.close()
    await assert_healthy(limits.nsqd)


async def test_mpub_is_all_or_nothing(limits: ServerProcess) -> None:
    sub = await RawNsq.open(limits.nsqd)
    bad = await RawNsq.open(limits.nsqd)
    try:
        await sub.sub("mpub_atomic", "c", rdy=10)
        bad.send_raw(mpub(b"mpub_atomic", element(b"one"), element(b"two"), size(0)))
        assert (await next_error(bad)).startswith(b"E_BAD_MESSAGE ")
        await assert_closed(bad)
        with pytest.raises(TimeoutError):
            await sub.message(timeout=1.0)  # neither valid element was published
        topic = stats(limits, "mpub_atomic")["topics"][0]
        assert topic["message_count"] == 0
        await assert_healthy(limits.nsqd)
    finally:
        sub.close()
        bad.close()


# --- IDENTIFY --------------------------------------------------------------------------------------------


async def test_identify_twice_is_accepted_and_sub_follows(limits: ServerProcess) -> None:
    """nsqd lets IDENTIFY repeat while the connection is in its initial state."""

    conn = await RawNsq.open(limits.nsqd)
    try:
        first = await conn.identify(client_id="one", msg_timeout=5000)
        second = await conn.identify(client_id="two", msg_timeout=6000)
        assert first["msg_timeout"] == 5000 and second["msg_timeout"] == 6000
        await conn.sub("twice", "c#ephemeral")
        await assert_usable(conn)
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("fields", "level"),
    [
        pytest.param({"deflate": True, "deflate_level": 9}, 6, id="capped_at_max"),
        pytest.param({"deflate": True, "deflate_level": 3}, 3, id="lower_kept"),
        pytest.param({"deflate": True, "deflate_level": 0}, 6, id="zero_default"),
        pytest.param({"deflate": True, "deflate_level": -4}, 6, id="negative_default"),
        pytest.param({"deflate": True}, 6, id="absent_default"),
        pytest.param(
            {"deflate": False, "deflate_level": 2},
            6,
            id="ignored_without_deflate",
        ),
    ],
)
async def test_identify_deflate_level(limits: ServerProcess, fields: dict[str, Any], level: int) -> None:
    conn = await RawNsq.open(limits.nsqd)
    try:
        answer = await conn.identify_upgrade(**fields)
        assert answer["deflate"] is bool(fields.get("deflate"))
        assert (answer["deflate_level"], answer["max_deflate_level"]) == (level, 6)
        await assert_usable(conn)  # through the compressed stream when deflate was granted
    finally:
        conn.close()


async def test_identify_sample_rate_delivers_a_sample(limits: ServerProcess) -> None:
    """sample_rate 50: nsqd delivers a message when a draw in [0,100) is <= 50 (about 51%), drops the rest."""
    total = 400

    sampled = await RawNsq.open(limits.nsqd)
    full = await RawNsq.open(limits.nsqd)
    pub = await RawNsq.open(limits.nsqd)
    try:
        answer = await sampled.identify(sample_rate=50)
        assert answer["sample_rate"] == 50
        await sampled.sub("sampled", "half", rdy=10)
        await full.sub("sampled", "all", rdy=10)
        for start in range(0, total, 100):
            assert await pub.mpub("sampled", [b"%04d" % i for i in range(start, start + 100)]) == b"OK"
        got_sampled, got_full = await asyncio.gather(sampled.drain(2.0), full.drain(2.0))
        assert sorted(got_full) == [b"%04d" % i for i in range(total)], "sampling is per client"
        assert len(set(got_sampled)) == len(got_sampled)
        assert 120 <= len(got_sampled) <= 300, f"{len(got_sampled)} of {total} delivered at sample_rate 50"
        channel = (channels_of(limits, "sampled") or {})["half"]
        assert channel["depth"] == 0 and channel["in_flight_count"] == 0, "skipped messages are dropped"
    finally:
        for c in (sampled, full, pub):
            c.close()


# --- FIN / REQ / TOUCH of a message another client owns ----------------------------------------------------


async def test_fin_req_touch_of_another_clients_message(roomy: ServerProcess) -> None:
    owner = await RawNsq.open(roomy.nsqd)
    other = await RawNsq.open(roomy.nsqd)
    pub = await RawNsq.open(roomy.nsqd)
    try:
        await owner.sub("owned", "c", rdy=1)
        await other.sub("owned", "c")  # RDY 0: the message can only go to ``owner``
        assert await pub.pub("owned", b"mine") == b"OK"
        msg = await owner.message(timeout=10)
        mid = msg.id.decode()
        for command, params, code, verb in (
            ("FIN", (msg.id,), "E_FIN_FAILED", "FIN"),
            ("REQ", (msg.id, "0"), "E_REQ_FAILED", "REQ"),
            ("TOUCH", (msg.id,), "E_TOUCH_FAILED", "TOUCH"),
        ):
            other.send(command, *params)
            assert (
                await next_error(other) == f"{code} {verb} {mid} failed client does not own message".encode()
            )
        await assert_usable(other)  # all three are non-fatal
        owner.send("TOUCH", msg.id)
        owner.send("FIN", msg.id)
        await assert_usable(owner)  # the owner's TOUCH and FIN drew no error
        other.send("FIN", msg.id)  # finished now: not in flight at all
        assert await next_error(other) == f"E_FIN_FAILED FIN {mid} failed ID not in flight".encode()
        await assert_usable(other)
    finally:
        for c in (owner, other, pub):
            c.close()


async def test_disconnected_owner_cannot_be_finished_by_a_reconnect(roomy: ServerProcess) -> None:
    """Ownership is per connection: the same client reconnecting gets 'client does not own message'."""

    first = await RawNsq.open(roomy.nsqd)
    pub = await RawNsq.open(roomy.nsqd)
    again = await RawNsq.open(roomy.nsqd)
    try:
        await first.sub("reconnect", "c", rdy=1)
        assert await pub.pub("reconnect", b"held") == b"OK"
        msg = await first.message(timeout=10)
        first.close()
        await eventually(
            lambda: (channels_of(roomy, "reconnect") or {}).get("c", {}).get("client_count") == 0,
            what="first consumer gone",
            in_thread=True,
        )
        await again.sub("reconnect", "c")
        again.send("FIN", msg.id)
        err = await next_error(again)
        assert err == f"E_FIN_FAILED FIN {msg.id.decode()} failed client does not own message".encode()
        await assert_usable(again)
    finally:
        for c in (first, pub, again):
            c.close()


# --- E_SUB_FAILED at --max-channel-consumers --------------------------------------------------------------


async def _fill_channel(server: ServerProcess, topic: str) -> list[RawNsq]:
    members = []
    for _ in range(ROOMY_CONSUMERS):
        conn = await RawNsq.open(server.nsqd)
        await conn.sub(topic, "c")
        members.append(conn)
    return members


async def test_sub_failed_when_channel_is_full(roomy: ServerProcess) -> None:
    members = await _fill_channel(roomy, "full")
    try:
        late = await RawNsq.open(roomy.nsqd)
        late.send("SUB", "full", "c")
        assert (await next_error(late)).startswith(b"E_SUB_FAILED ")
        await assert_closed(late)
        late.close()
        elsewhere = await RawNsq.open(roomy.nsqd)
        await elsewhere.sub("full", "other")  # the limit is per channel
        elsewhere.close()
        await assert_usable(members[0])  # the members are untouched
        members[0].close()
        deadline = time.monotonic() + 10
        while True:  # once a member has left, there is room again
            retry = await RawNsq.open(roomy.nsqd)
            retry.send("SUB", "full", "c")
            ftype, data = await retry.frame()
            retry.close()
            if ftype == FrameType.RESPONSE and data == b"OK":
                break
            assert data.startswith(b"E_SUB_FAILED ") and time.monotonic() < deadline, data
            await asyncio.sleep(0.1)
        await assert_healthy(roomy.nsqd)
    finally:
        for c in members:
            c.close()


async def test_sub_failed_description(roomy: ServerProcess) -> None:
    members = await _fill_channel(roomy, "full_text")
    late = await RawNsq.open(roomy.nsqd)
    try:
        late.send("SUB", "full_text", "c")
        expected = f"E_SUB_FAILED SUB failed consumers for full_text:c exceeds limit of {ROOMY_CONSUMERS}"
        assert await next_error(late) == expected.encode()
    finally:
        for c in (*members, late):
            c.close()


# --- ephemeral topics and channels ---------------------------------------------------------------------


async def test_ephemeral_channel_disappears_with_its_last_client(limits: ServerProcess) -> None:
    a = await RawNsq.open(limits.nsqd)
    b = await RawNsq.open(limits.nsqd)
    durable = await RawNsq.open(limits.nsqd)
    try:
        await a.sub("eph_topic", "gone#ephemeral")
        await b.sub("eph_topic", "gone#ephemeral")
        await durable.sub("eph_topic", "stays")
        assert (channels_of(limits, "eph_topic") or {})["gone#ephemeral"]["client_count"] == 2
        a.close()
        await eventually(
            lambda: (
                (channels_of(limits, "eph_topic") or {}).get("gone#ephemeral", {}).get("client_count") == 1
            ),
            what="one client left",
            in_thread=True,
        )
        b.close()
        await eventually(
            lambda: "gone#ephemeral" not in (channels_of(limits, "eph_topic") or {"gone#ephemeral": 1}),
            what="ephemeral channel deleted",
            in_thread=True,
        )
        durable.close()
        await asyncio.sleep(0.3)
        assert "stays" in (channels_of(limits, "eph_topic") or {}), "a durable channel outlives its clients"
    finally:
        for c in (a, b, durable):
            c.close()


async def test_ephemeral_topic_goes_with_its_last_channel(limits: ServerProcess) -> None:
    conn = await RawNsq.open(limits.nsqd)
    await conn.sub("vanish#ephemeral", "c#ephemeral")
    assert channels_of(limits, "vanish#ephemeral") is not None
    conn.close()
    await eventually(
        lambda: channels_of(limits, "vanish#ephemeral") is None,
        what="ephemeral topic deleted",
        in_thread=True,
    )


async def _overflow(server: ServerProcess, topic: str, channel: str, count: int = 20) -> list[bytes]:
    """Publish ``count`` messages one by one while the only consumer has RDY 0, then take what is kept."""
    sub = await RawNsq.open(server.nsqd)
    pub = await RawNsq.open(server.nsqd)
    try:
        await sub.sub(topic, channel)
        for i in range(count):
            assert await pub.pub(topic, b"%02d" % i) == b"OK"
        sub.send("RDY", "10")
        return await sub.drain(1.5)
    finally:
        sub.close()
        pub.close()


async def test_ephemeral_channel_drops_overflow(limits: ServerProcess) -> None:
    got = await _overflow(limits, "overflow#ephemeral", "c#ephemeral")
    assert len(got) == MEM_QUEUE, f"kept {got}"


async def test_ephemeral_channel_keeps_the_oldest(limits: ServerProcess) -> None:
    got = await _overflow(limits, "oldest#ephemeral", "c#ephemeral")
    assert got == [b"%02d" % i for i in range(MEM_QUEUE)]


async def test_ephemeral_channel_of_durable_topic_drops_overflow(limits: ServerProcess) -> None:
    got = await _overflow(limits, "durable_overflow", "c#ephemeral")
    assert len(got) == MEM_QUEUE, f"kept {len(got)}"


async def test_durable_channel_of_ephemeral_topic_keeps_everything(limits: ServerProcess) -> None:
    got = await _overflow(limits, "keepall#ephemeral", "durable")
    assert len(got) == 20, f"kept {len(got)}"


# --- a consumer that stops reading ------------------------------------------------------------------------


async def _non_reading_consumer(addr: str) -> RawNsq:
    """A consumer with tiny socket and StreamReader buffers, so the server's backlog builds up fast."""
    host, port = addr.rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
    reader, writer = await asyncio.open_connection(sock=sock, limit=4096)
    conn = RawNsq(reader, writer)
    writer.write(MAGIC_V2)
    return conn


async def test_consumer_that_stops_reading_is_cut_off(roomy: ServerProcess) -> None:
    """A consumer that does not read gets nothing more once its transport holds 1 MiB, and is dropped
    when nothing drained for its heartbeat interval (nsqd's write deadline; 2 s here); its channel mate
    goes on.

    The stuck consumer has RDY 64 and the reader RDY 1, so the server prefers the stuck one until it is cut
    off; its in-flight messages are redelivered to the reader after the 2 s msg timeout.
    """
    chunk = 512 * 1024
    batch = 8  # 4 MiB per MPUB, under the 5 MiB max-body-size

    stuck = await _non_reading_consumer(roomy.nsqd)
    reader = await RawNsq.open(roomy.nsqd)
    pub = await RawNsq.open(roomy.nsqd)
    received: set[int] = set()
    first_attempts: set[int] = set()
    published = 0

    async def consume() -> None:
        while True:
            msg = await reader.message(timeout=30)
            index = int(msg.body[:6])
            received.add(index)
            if msg.attempts == 1:
                first_attempts.add(index)
            reader.send("FIN", msg.id)

    consumer: asyncio.Task[None] | None = None
    try:
        await stuck.identify(heartbeat_interval=2000)
        await stuck.sub("slow", "c")
        stuck.send("RDY", "64")  # and never read again
        await reader.sub("slow", "c", rdy=1)
        consumer = asyncio.create_task(consume())

        def stuck_gone() -> bool:
            return (channels_of(roomy, "slow") or {}).get("c", {}).get("client_count") == 1

        cut = False
        while published < 128 and not (cut and published >= 64):
            bodies = [b"%06d" % i + b"." * (chunk - 6) for i in range(published, published + batch)]
            assert await pub.mpub("slow", bodies) == b"OK"
            published += batch
            cut = await asyncio.to_thread(stuck_gone)
        if not cut:
            await eventually(stuck_gone, timeout=10, what="the non-reading consumer cut off", in_thread=True)
        deadline = time.monotonic() + 30
        while len(received) < published and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert received == set(range(published)), f"reader got {len(received)} of {published}"
        # some went straight to the reader, the rest reached it after the stuck consumer lost them
        assert 0 < len(first_attempts) < published, (len(first_attempts), published)
        with pytest.raises(ConnectionError):  # the stuck consumer's socket ends (EOF or reset)
            while True:
                await stuck.frame(timeout=10)
        consumer.cancel()
        await asyncio.gather(consumer, return_exceptions=True)
        await assert_usable(reader)
        await assert_healthy(roomy.nsqd)
    finally:
        if consumer is not None:
            consumer.cancel()
        for c in (stuck, reader, pub):
            c.close()


# --- heartbeats disabled ------------------------------------------------------------------------------------


async def test_heartbeats_disabled_refuses_sub_but_allows_publishing(limits: ServerProcess) -> None:
    producer = await open_in(limits.nsqd, Setup.HB_OFF)
    assert await producer.pub("hb_off", b"fine") == b"OK"
    producer.close()
    consumer = await open_in(limits.nsqd, Setup.HB_OFF)
    consumer.send("SUB", "hb_off", "c")
    assert await next_error(consumer) == b"E_INVALID cannot SUB with heartbeats disabled"
    await assert_closed(consumer)
    consumer.close()
    await assert_healthy(limits.nsqd)
