"""tidemq against the real nsqd and nsqlookupd v1.3.0 (built by ``make nsq-go``; marker ``real_nsq``).

Two directions of one promise:

* tidemq's NSQ clients work against the real servers: the Producer (PUB, MPUB, DPUB; plain, snappy,
  deflate, TLS), the Consumer directly and through the real nsqlookupd, RDY spread over two real nsqd,
  backoff, REQ and TOUCH, and the ``tidemq nsq publish|tail`` tools. The other side of every exchange is
  checked with the raw V2 client, with the same assertions as the pynsq interop tests.
* tidemq's nsqd answers as the real one does: the error table of ``tests/nsqd_error_cases.py`` (whose
  expectations ``test_nsqd_errors.py`` holds tidemq's nsqd to) is run against the real nsqd, and the same
  raw sessions are compared answer by answer on both servers.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator

import pytest
import trustme

from tests.nsq_support import tls_files, trusting, wait_until
from tests.nsqd_error_cases import ACCEPTED, CASES, LIMITS_ARGS, Accepted, Case
from tests.real_nsq_support import RealLookupd, RealNsqd, nsq_binaries
from tests.support import run, unique
from tests.test_interop_nsq import MPUB_BATCH, make_bodies, raw_drain, raw_publish
from tests.test_nsqd_errors import assert_closed, assert_usable, next_error, open_in
from tidemq.nsq.client import Consumer, Message, Producer, ProtocolError
from tidemq.nsq.protocol import FrameType

pytestmark = pytest.mark.real_nsq

MSG_TIMEOUT_MS = 3000
COMPRESSIONS = ["none", "snappy", "deflate"]


def compression_options(compression: str) -> dict[str, bool]:
    return {"snappy": compression == "snappy", "deflate": compression == "deflate"}


@pytest.fixture(scope="module")
def lookupd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealLookupd]:
    nsq_binaries()
    proc = RealLookupd(tmp_path_factory.mktemp("real-lookupd") / "d")
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, lookupd: RealLookupd, ca: trustme.CA
) -> Iterator[list[RealNsqd]]:
    """Two real nsqd registered with the real nsqlookupd; TLS offered (not required)."""
    procs: list[RealNsqd] = []
    try:
        for i in range(2):
            folder = tmp_path_factory.mktemp(f"real-nsqd{i}")
            cert, key = tls_files(ca, folder)
            proc = RealNsqd(
                folder / "data",
                f"--msg-timeout={MSG_TIMEOUT_MS}ms",
                f"--lookupd-tcp-address={lookupd.tcp}",
                f"--tls-cert={cert}",
                f"--tls-key={key}",
            )
            proc.start()
            procs.append(proc)
        yield procs
    finally:
        for proc in procs:
            proc.stop()


@pytest.fixture(scope="module")
def real(pair: list[RealNsqd]) -> RealNsqd:
    return pair[0]


@pytest.fixture(scope="module")
def real_limits(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNsqd]:
    """The real nsqd with the error table's small limits (``LIMITS_ARGS``)."""
    nsq_binaries()
    proc = RealNsqd(tmp_path_factory.mktemp("real-limits") / "data", *LIMITS_ARGS)
    proc.start()
    yield proc
    proc.stop()


# --- the error table, run against the real nsqd ------------------------------------------------------


#: Cases where tidemq deliberately differs (spec 1.5): nsqd reads MPUB elements straight off the socket,
#: past the outer size, so it waits for more bytes (or takes the rest as the next command) where tidemq
#: reads exactly the outer size and refuses the inconsistent body with a fatal E_BAD_BODY.
MPUB_READS_PAST_OUTER_SIZE = {"mpub_element_truncated", "mpub_count_exceeds_elements", "mpub_trailing_bytes"}


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
def test_error_table_matches_the_real_nsqd(real_limits: RealNsqd, case: Case) -> None:
    """The answers tidemq's nsqd is held to are the real nsqd's answers (code, text, fatality)."""

    async def deviation() -> None:
        conn = await open_in(real_limits.nsqd, case.setup)
        try:
            conn.send_raw(case.send)
            try:
                ftype, data = await conn.frame(timeout=1.0)
            except TimeoutError:
                return  # still reading elements past the outer size
            assert (ftype, data) == (FrameType.RESPONSE, b"OK"), (ftype, data)  # the extra bytes come later
        finally:
            conn.close()

    async def scenario() -> None:
        conn = await open_in(real_limits.nsqd, case.setup)
        try:
            conn.send_raw(case.send)
            data = await next_error(conn)
            assert data.split(b" ", 1)[0] == case.code.encode(), data
            if case.payload is not None:
                assert data == case.payload
            if case.fatal:
                await assert_closed(conn)
            else:
                await assert_usable(conn)
        finally:
            conn.close()

    run(deviation() if case.id in MPUB_READS_PAST_OUTER_SIZE else scenario())


@pytest.mark.parametrize("acc", [pytest.param(a, id=a.id) for a in ACCEPTED])
def test_accepted_table_matches_the_real_nsqd(real_limits: RealNsqd, acc: Accepted) -> None:
    async def scenario() -> None:
        conn = await open_in(real_limits.nsqd, acc.setup)
        try:
            conn.send_raw(acc.send)
            for expected in acc.responses:
                ftype, data = await conn.frame()
                assert (ftype, data) == (FrameType.RESPONSE, expected)
            await assert_usable(conn)
        finally:
            conn.close()

    run(scenario())


# --- tidemq's Producer against the real nsqd ----------------------------------------------------------


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_producer_pub_mpub_dpub_reach_the_real_nsqd(real: RealNsqd, compression: str) -> None:
    topic = unique(f"tpub_{compression}")
    bodies = [b.encode() for b in make_bodies(topic)]
    singles, batched, deferred = bodies[:20], bodies[20:43], bodies[43:]

    async def go() -> None:
        async with Producer(real.nsqd, **compression_options(compression)) as producer:
            for body in singles:
                await producer.publish(topic, body)
            for i in range(0, len(batched), MPUB_BATCH):
                await producer.multi_publish(topic, batched[i : i + MPUB_BATCH])
            # Granted what was asked, on the real nsqd's word.
            identify = producer._conn.identify if producer._conn is not None else None
            assert identify is not None and identify.max_rdy_count == 2500
            assert (identify.snappy, identify.deflate) == (compression == "snappy", compression == "deflate")
            for body in deferred:
                await producer.deferred_publish(topic, 0.5, body)

    run(go())
    got = raw_drain(real.nsqd, topic, "check", len(bodies), quiet=1.0)
    assert sorted(m.body for m in got) == sorted(bodies)
    assert all(m.attempts == 1 for m in got)


def test_producer_error_frames_from_the_real_nsqd(real: RealNsqd) -> None:
    """The real nsqd's refusals surface as the Producer's errors, and the Producer goes on afterwards."""

    async def go() -> None:
        async with Producer(real.nsqd) as producer:
            with pytest.raises(ProtocolError, match=r"^E_BAD_BODY MPUB invalid message count 0$"):
                await producer.multi_publish("tpub_errors", [])
            await producer.publish("tpub_errors", b"after")
            with pytest.raises(ProtocolError, match="E_INVALID"):
                await producer.deferred_publish("tpub_errors", 3601, b"too late")  # over --max-req-timeout
            await producer.publish("tpub_errors", b"after again")

    run(go())
    got = raw_drain(real.nsqd, "tpub_errors", "c", 2, quiet=0.5)
    assert sorted(m.body for m in got) == [b"after", b"after again"]


# --- tidemq's Consumer against the real nsqd ----------------------------------------------------------


async def consume_all(
    consumer: Consumer, count: int, connect: object, timeout: float = 30.0
) -> list[Message]:
    got: list[Message] = []

    async def handler(message: Message) -> None:
        got.append(message)

    consumer.add_handler(handler, concurrency=3)
    await connect  # type: ignore[misc]
    await wait_until(lambda: len(got) >= count, timeout=timeout, what=f"{count} messages")
    await asyncio.sleep(0.2)  # a duplicate would show up here
    await consumer.stop()
    return got


@pytest.mark.parametrize("compression", [*COMPRESSIONS, "tls", "tls_snappy"])
def test_consumer_consumes_and_finishes_everything(real: RealNsqd, ca: trustme.CA, compression: str) -> None:
    topic = unique(f"tsub_{compression}")
    bodies = make_bodies(topic)
    raw_publish(real.nsqd, topic, [b.encode() for b in bodies])
    options: dict[str, object] = compression_options(compression.removeprefix("tls_"))
    if compression.startswith("tls"):
        options |= {"tls_v1": True, "tls_config": trusting(ca)}

    async def go() -> list[Message]:
        consumer = Consumer(topic, "c", max_in_flight=7, **options)
        granted: list[tuple[bool, bool, bool]] = []

        async def handler(message: Message) -> None:
            got.append(message)
            identify = message.conn.identify
            assert identify is not None
            granted.append((identify.tls_v1, identify.snappy, identify.deflate))

        got: list[Message] = []
        consumer.add_handler(handler, concurrency=3)
        await consumer.connect_to_nsqd(real.nsqd)
        await wait_until(lambda: len(got) >= len(bodies), timeout=30, what="every message")
        await asyncio.sleep(0.2)  # a duplicate would show up here
        await consumer.stop()
        mode = compression.split("_")
        assert set(granted) == {("tls" in mode, "snappy" in mode, "deflate" in mode)}
        return got

    got = run(go())
    assert sorted(m.body.decode() for m in got) == sorted(bodies)
    assert all(m.attempts == 1 for m in got)
    assert len({m.id for m in got}) == len(bodies)
    raw_drain(real.nsqd, topic, "c", 0, quiet=MSG_TIMEOUT_MS / 1000 + 1.5)


def test_consumer_through_the_real_lookupd_spreads_rdy_over_two_nsqd(
    pair: list[RealNsqd], lookupd: RealLookupd
) -> None:
    """Found through nsqlookupd: both nsqd connected, max in flight 32 split 16 + 16, everything consumed."""
    topic = unique("tlookup")
    for i, proc in enumerate(pair):
        raw_publish(proc.nsqd, topic, [f"{i}-{n}".encode() for n in range(40)])

    async def go() -> tuple[list[Message], list[int], set[str]]:
        consumer = Consumer(topic, "c", max_in_flight=32, lookupd_poll_interval=1.0)
        got: list[Message] = []
        rdys: list[int] = []

        async def handler(message: Message) -> None:
            got.append(message)
            if not rdys and len(consumer.connections()) == 2:
                rdys.extend(sorted(c.rdy for c in consumer.connections()))

        consumer.add_handler(handler)
        await consumer.connect_to_lookupd(lookupd.http)
        await wait_until(lambda: len(got) >= 80, timeout=30, what="80 messages from two nsqd")
        addrs = {c.addr for c in consumer.connections()}
        await consumer.stop()
        return got, rdys, addrs

    got, rdys, addrs = run(go())
    assert addrs == {p.nsqd for p in pair}
    assert rdys == [16, 16]
    assert Counter(m.body.split(b"-")[0] for m in got) == Counter({b"0": 40, b"1": 40})
    for proc in pair:
        raw_drain(proc.nsqd, topic, "c", 0, quiet=0.5)


def test_max_in_flight_1_rotates_over_two_real_nsqd(pair: list[RealNsqd]) -> None:
    """With one RDY for two connections it moves between them: both nsqd's messages get through."""
    topic = unique("trotate")
    for i, proc in enumerate(pair):
        raw_publish(proc.nsqd, topic, [f"{i}-{n}".encode() for n in range(4)])

    async def go() -> tuple[list[Message], int]:
        consumer = Consumer(
            topic, "c", max_in_flight=1, rdy_redistribute_interval=0.2, low_rdy_idle_timeout=1.0
        )
        got: list[Message] = []
        peak = 0

        async def handler(message: Message) -> None:
            nonlocal peak
            peak = max(peak, sum(c.rdy for c in consumer.connections()))
            got.append(message)

        consumer.add_handler(handler)
        await consumer.connect_to_nsqds([p.nsqd for p in pair])
        await wait_until(lambda: len(got) >= 8, timeout=30, what="8 messages")
        await consumer.stop()
        return got, peak

    got, peak = run(go())
    assert sorted(m.body for m in got) == sorted(f"{i}-{n}".encode() for i in range(2) for n in range(4))
    assert peak <= 1


def test_backoff_req_and_touch_against_the_real_nsqd(real: RealNsqd) -> None:
    """A failure REQs with backoff (RDY 0, then 1, then back); TOUCH keeps a slow message; REQ redelivers."""
    topic = unique("tbackoff")

    async def go() -> None:
        consumer = Consumer(
            topic, "c", max_in_flight=4, backoff_multiplier=0.2, default_requeue_delay=0.0, msg_timeout=1.0
        )
        handled: dict[bytes, list[tuple[int, int]]] = {}  # body: [(attempts, total RDY when handled)]

        def rdy() -> int:
            return sum(c.rdy for c in consumer.connections())

        async def handler(message: Message) -> None:
            handled.setdefault(message.body, []).append((message.attempts, rdy()))
            if message.body == b"fail" and message.attempts == 1:
                raise RuntimeError("first attempt fails")
            if message.body == b"slow":
                for _ in range(15):  # 1.5 s, past the 1 s msg_timeout negotiated in IDENTIFY
                    await asyncio.sleep(0.1)
                    message.touch()
            if message.body == b"later" and message.attempts == 1:
                message.requeue(0.3, backoff=False)

        consumer.add_handler(handler, concurrency=4)
        await consumer.connect_to_nsqd(real.nsqd)
        identify = consumer.connections()[0].identify
        assert identify is not None and identify.msg_timeout == 1000
        await wait_until(lambda: rdy() == 4, what="RDY 4")
        await publish_bodies(real.nsqd, topic, [b"fail"])
        await wait_until(lambda: len(handled.get(b"fail", [])) == 2, what="the failed message back")
        await wait_until(lambda: rdy() == 4, what="out of backoff")
        await publish_bodies(real.nsqd, topic, [b"slow", b"later", b"ok"])
        await wait_until(
            lambda: len(handled) == 4 and len(handled[b"later"]) == 2 and rdy() == 4, what="all handled"
        )
        await asyncio.sleep(1.5)  # a slow message that was not kept alive would come back by now
        await consumer.stop()
        # After the failure: RDY 0 for the backoff window, then RDY 1 brings the message back, then 4.
        assert handled[b"fail"] == [(1, 4), (2, 1)]
        attempts = {body: [a for a, _ in seen] for body, seen in handled.items()}
        assert attempts == {b"fail": [1, 2], b"slow": [1], b"later": [1, 2], b"ok": [1]}

    run(go())
    raw_drain(real.nsqd, topic, "c", 0, quiet=MSG_TIMEOUT_MS / 1000 + 1.0)


async def publish_bodies(addr: str, topic: str, bodies: list[bytes]) -> None:
    async with Producer(addr) as producer:
        for body in bodies:
            await producer.publish(topic, body)


# --- the tidemq nsq tools against the real nsqd -------------------------------------------------------


def test_cli_publish_and_tail_against_the_real_nsqd(real: RealNsqd, lookupd: RealLookupd) -> None:
    topic = unique("tcli")
    lines = [f"line {i} é" for i in range(25)]
    pub = subprocess.run(
        [sys.executable, "-m", "tidemq", "nsq", "publish", "--topic", topic, "--nsqd-tcp-address", real.nsqd],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert pub.returncode == 0, pub.stderr
    assert f"published 25 messages to {topic}" in pub.stderr
    for how in (["--nsqd-tcp-address", real.nsqd], ["--lookupd-http-address", lookupd.http]):
        # Each tail reads a new ephemeral channel: the first channel of a topic gets what waited in it.
        if how[0] == "--lookupd-http-address":
            raw_publish(real.nsqd, topic, [line.encode() for line in lines])
        tail = subprocess.run(
            [sys.executable, "-m", "tidemq", "nsq", "tail", "--topic", topic, "-n", "25", *how],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert tail.returncode == 0, tail.stderr
        assert sorted(tail.stdout.splitlines()) == sorted(lines)
