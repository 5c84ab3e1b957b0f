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
import re
import struct
import subprocess
import sys
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import trustme

from tests.interop.test_interop_nsq import MPUB_BATCH, make_bodies, raw_drain, raw_publish
from tests.nsq.nsqd.test_nsqd_errors import check_accepted, check_error, open_in
from tests.nsq_support import LookupdProcess, RawNsq, tls_files, trusting
from tests.nsqd_error_cases import ACCEPTED, CASES, LIMITS_ARGS, Accepted, Case
from tests.real_nsq_support import RealLookupd, RealNsqd, nsq_binaries
from tests.support import ServerProcess, eventually, run, unique, wait_for
from tidemq.nsq.client import Consumer, Message, Producer, ProtocolError
from tidemq.nsq.protocol import FrameType

pytestmark = [pytest.mark.e2e, pytest.mark.real_nsq]

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

    run(
        deviation()
        if case.id in MPUB_READS_PAST_OUTER_SIZE
        else check_error(real_limits.nsqd, case, payload=True)
    )


@pytest.mark.parametrize("acc", [pytest.param(a, id=a.id) for a in ACCEPTED])
async def test_accepted_table_matches_the_real_nsqd(real_limits: RealNsqd, acc: Accepted) -> None:
    await check_accepted(real_limits.nsqd, acc)


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
    await eventually(lambda: len(got) >= count, timeout=timeout, what=f"{count} messages")
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
        await eventually(lambda: len(got) >= len(bodies), timeout=30, what="every message")
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
        await eventually(lambda: len(got) >= 80, timeout=30, what="80 messages from two nsqd")
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
        await eventually(lambda: len(got) >= 8, timeout=30, what="8 messages")
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
        await eventually(lambda: rdy() == 4, what="RDY 4")
        await publish_bodies(real.nsqd, topic, [b"fail"])
        await eventually(lambda: len(handled.get(b"fail", [])) == 2, what="the failed message back")
        await eventually(lambda: rdy() == 4, what="out of backoff")
        await publish_bodies(real.nsqd, topic, [b"slow", b"later", b"ok"])
        await eventually(
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


# --- tidemq's nsqd answers as the real one does ------------------------------------------------------


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, RealNsqd]]:
    """A ``tidemq nsqd`` and a real nsqd with the same (default) settings, to ask the same questions."""
    nsq_binaries()
    ours = ServerProcess(tmp_path_factory.mktemp("twin-tidemq") / "data", command="nsqd")
    theirs = RealNsqd(tmp_path_factory.mktemp("twin-real") / "data")
    try:
        ours.start()
        theirs.start()
        yield ours, theirs
    finally:
        ours.stop()
        theirs.stop()


def http(method: str, url: str, body: bytes = b"") -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body if method in ("POST", "PUT") else None, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return int(resp.status), bytes(resp.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), bytes(exc.read())


def mpub_binary(*elements: bytes, count: int | None = None) -> bytes:
    return struct.pack(">i", len(elements) if count is None else count) + b"".join(elements)


def element(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


#: Requests whose status and body must be byte for byte the real nsqd's (in this order, on both servers).
HTTP_EXCHANGES: list[tuple[str, str, bytes]] = [
    ("GET", "/ping", b""),
    ("GET", "/nope", b""),
    ("POST", "/pub", b"x"),
    ("POST", "/pub?topic=bad!", b"x"),
    ("POST", "/pub?topic=h1", b""),
    ("POST", "/pub?topic=h1", b"hello"),
    ("POST", "/pub?topic=h1&defer=100", b"later"),
    ("POST", "/pub?topic=h1&defer=abc", b"x"),
    ("POST", "/pub?topic=h1&defer=-1", b"x"),
    ("PUT", "/pub?topic=h1", b"x"),
    ("POST", "/mpub?topic=h1", b"a\nb\n\nc\n"),
    ("POST", "/mpub?topic=h1", b""),
    ("POST", "/mpub?topic=h1&binary=true", mpub_binary(element(b"a"))),
    ("POST", "/mpub?topic=h1&binary=true", mpub_binary(element(b"a"), count=2)),  # count past the body
    ("POST", "/mpub?topic=h1&binary=true", mpub_binary(element(b"a"), b"\x00\x00\x00\x09ab", count=2)),  # cut
    ("POST", "/mpub?topic=h1&binary=true", mpub_binary(element(b"a")) + b"zz"),  # bytes past the count
    ("POST", "/mpub?topic=h1&binary=true", mpub_binary(count=0)),
    ("POST", "/mpub?topic=h1&binary=true", mpub_binary(struct.pack(">i", 0))),
    ("POST", "/mpub?topic=h1&binary=true", b"\x00\x00"),
    ("POST", "/topic/create?topic=bad!", b""),
    ("POST", "/topic/create?topic=h2", b""),
    ("POST", "/topic/pause?topic=nope", b""),
    ("POST", "/topic/pause?topic=h2", b""),
    ("POST", "/channel/create?topic=h2&channel=bad!", b""),
    ("POST", "/channel/create?topic=h2&channel=c", b""),
    ("POST", "/channel/pause?topic=h2&channel=c", b""),
    ("POST", "/channel/empty?topic=h2&channel=nope", b""),
    ("GET", "/config/nope", b""),
    ("GET", "/config/log_level", b""),
    ("PUT", "/config/log_level", b"Debug"),
    ("PUT", "/config/log_level", b"debug\n"),
    ("PUT", "/config/log_level", b"loud"),
    ("GET", "/config/log_level", b""),
    ("PUT", "/config/log_level", b"info"),
    ("POST", "/channel/delete?topic=h2&channel=c", b""),
    ("POST", "/topic/delete?topic=h2", b""),
    ("POST", "/topic/delete?topic=h2", b""),
]


def test_http_api_answers_as_the_real_nsqd(twins: tuple[ServerProcess, RealNsqd]) -> None:
    ours, theirs = twins
    differences = []
    for method, path, body in HTTP_EXCHANGES:
        mine = http(method, f"http://{ours.nsqd_http}{path}", body)
        real = http(method, f"http://{theirs.nsqd_http}{path}", body)
        if mine != real:
            differences.append(f"{method} {path} {body[:20]!r}: tidemq {mine}, nsqd {real}")
    assert differences == []
    # And what was published got through the same way on both.
    for proc in twins:
        got = raw_drain(proc.nsqd, "h1", "check", 7, quiet=0.5)
        assert sorted(m.body for m in got) == sorted([b"hello", b"later", b"a", b"b", b"c", b"a", b"a"])


def _shape(value: Any) -> Any:
    """JSON keys (in order) and value types, lists by their first element: what a reader of it relies on."""
    if isinstance(value, dict):
        return [(key, _shape(item)) for key, item in value.items()]
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return type(value).__name__


async def _stats_scene(addr: str) -> list[RawNsq]:
    """A consumer holding one message in flight, a producer with one PUB, a paused channel elsewhere."""
    sub = await RawNsq.open(addr)
    await sub.identify(client_id="c", hostname="hn", user_agent="ua/1")
    await sub.sub("scene", "ch", rdy=5)
    pub = await RawNsq.open(addr)
    await pub.identify(client_id="p", hostname="hn", user_agent="ua/1")
    assert await pub.pub("scene", b"x") == b"OK"
    await sub.message()
    return [sub, pub]


def _masked(text: str) -> str:
    """The text /stats with what differs between any two runs masked: times, ports, Go heap figures."""
    text = re.sub(r"^nsqd v1\.3\.0 \(.*\)$", "nsqd v1.3.0 (build)", text, flags=re.M)
    text = re.sub(
        r"^start_time \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)$", "start_time T", text, flags=re.M
    )
    text = re.sub(r"^uptime (\d+(\.\d+)?(h|m|s|ms|µs|ns))+$", "uptime D", text, flags=re.M)
    text = re.sub(r"^(   \w+ +\t)\d+$", r"\1N", text, flags=re.M)
    text = re.sub(r"(\[V2 hn:)\d{5}", r"\1PPPPP", text)
    return re.sub(r"connected: \d+s", "connected: Ns", text)


async def test_stats_json_and_text_as_the_real_nsqd(twins: tuple[ServerProcess, RealNsqd]) -> None:
    conns = [c for proc in twins for c in await _stats_scene(proc.nsqd)]
    try:
        for proc in twins:
            assert http("POST", f"http://{proc.nsqd_http}/topic/create?topic=quiet")[0] == 200
            assert http("POST", f"http://{proc.nsqd_http}/channel/create?topic=quiet&channel=q")[0] == 200
            assert http("POST", f"http://{proc.nsqd_http}/channel/pause?topic=quiet&channel=q")[0] == 200
        pages = ["/info", "/stats?format=json&topic=scene", "/stats?format=json&topic=quiet"]
        pages += ["/stats?format=json&topic=scene&channel=nope", "/stats?format=json&topic=nope"]
        pages += ["/stats?format=json&topic=scene&include_clients=false&include_mem=false"]
        for page in pages:
            mine, real = (orjson.loads(http("GET", f"http://{p.nsqd_http}{page}")[1]) for p in twins)
            assert _shape(mine) == _shape(real), page
        for page in ("/stats?topic=scene", "/stats?topic=quiet", "/stats?topic=nope"):
            mine_text, real_text = (http("GET", f"http://{p.nsqd_http}{page}")[1].decode() for p in twins)
            assert _masked(mine_text) == _masked(real_text), f"{page}:\n{mine_text}\n{real_text}"
    finally:
        for conn in conns:
            conn.close()


def test_identify_response_as_the_real_nsqd(twins: tuple[ServerProcess, RealNsqd]) -> None:
    """The same IDENTIFY draws the same JSON (fields, order, values) from both."""
    fields = {
        "client_id": "twin",
        "hostname": "hn",
        "user_agent": "ua/1",
        "msg_timeout": 5000,
        "sample_rate": 10,
        "heartbeat_interval": 5000,
        "output_buffer_size": 32768,
        "output_buffer_timeout": 100,
        "topology_zone": "z",  # go-nsq sends these; nsqd 1.3.0 neither uses nor echoes them
        "topology_region": "r",
    }

    async def answer(addr: str) -> list[tuple[str, object]]:
        conn = await RawNsq.open(addr)
        try:
            return list((await conn.identify(**fields)).items())
        finally:
            conn.close()

    ours, theirs = (run(answer(proc.nsqd)) for proc in twins)
    assert ours == theirs


LOOKUPD_EXCHANGES = [
    ("GET", "/ping"),
    ("GET", "/nope"),
    ("GET", "/info"),
    ("GET", "/lookup"),
    ("GET", "/lookup?topic=nope"),
    ("GET", "/lookup?topic=bad!"),
    ("GET", "/topics"),
    ("GET", "/channels"),
    ("GET", "/channels?topic=lk"),
    ("POST", "/topic/create"),
    ("POST", "/topic/create?topic=bad!"),
    ("POST", "/topic/create?topic=made"),
    ("POST", "/channel/create?topic=made&channel=bad!"),
    ("POST", "/channel/create?topic=made&channel=c"),
    ("GET", "/channels?topic=made"),
    ("POST", "/channel/delete?topic=made&channel=nope"),
    ("POST", "/channel/delete?topic=made&channel=c"),
    ("POST", "/topic/delete?topic=made"),
    ("POST", "/topic/tombstone?topic=lk"),
    ("POST", "/topic/tombstone?topic=lk&node=nope:1"),
    ("GET", "/topic/create?topic=x"),
]


def test_lookupd_answers_as_the_real_nsqlookupd(tmp_path: Path) -> None:
    """tidemq's nsqlookupd, with a tidemq nsqd registered, next to the real pair: same answers and shapes."""
    ours = LookupdProcess(tmp_path / "ours-lookupd")
    theirs = RealLookupd(tmp_path / "real-lookupd")
    bases = [ours.http, f"http://{theirs.http}"]
    started: list[ServerProcess] = []
    try:
        for lookupd, base in zip((ours, theirs), bases, strict=True):
            lookupd.start()
            started.append(lookupd)
            node: ServerProcess
            if lookupd is ours:
                node = ServerProcess(tmp_path / "ours", "--lookupd-tcp-address", ours.tcp, command="nsqd")
            else:
                node = RealNsqd(tmp_path / "real", f"--lookupd-tcp-address={theirs.tcp}")
            node.start()
            started.append(node)
            assert http("POST", f"http://{node.nsqd_http}/topic/create?topic=lk")[0] == 200
            assert http("POST", f"http://{node.nsqd_http}/channel/create?topic=lk&channel=c")[0] == 200
            wait_for(lambda base=base: http("GET", f"{base}/channels?topic=lk")[1] == b'{"channels":["c"]}')
        for page in ("/lookup?topic=lk", "/nodes", "/debug"):
            mine, real = (orjson.loads(http("GET", base + page)[1]) for base in bases)
            assert _shape(mine) == _shape(real), page
        differences = []
        for method, path in LOOKUPD_EXCHANGES:
            mine_answer, real_answer = (http(method, base + path) for base in bases)
            if mine_answer != real_answer:
                differences.append(f"{method} {path}: tidemq {mine_answer}, nsqlookupd {real_answer}")
        assert differences == []
    finally:
        for proc in reversed(started):
            proc.stop()
