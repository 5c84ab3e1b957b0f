"""Issue 23's abuse cases (findings 1, 2, 3, 6, 7, 8) one after another against ONE real ``tidemq server``
with its default limits, beside a canary that runs throughout (an NSQ PUB, its delivery and FIN, a RocketMQ
send: :class:`ThreadedCanary`). Each case reports a row: acknowledged (canary rounds + the abuse's
acknowledged messages), lost (acknowledged never consumed), the canary's worst gap during the case, the
server's peak VmRSS; and fails past the bounds below (docs/reliability.md#abuse-cases-beside-a-canary).
``make test`` runs each case at a reduced size; ``make chaos`` (TIDEMQ_CHAOS=long) at the issue's sizes."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

import orjson
import pytest

from tests.chaos.chaos_support import (
    LONG,
    STALL_BOUND_MS,
    Row,
    ThreadedCanary,
    count_nsq_messages,
    report,
)
from tests.nsq_support import RawNsq
from tests.support import RawClient, ServerProcess, create_topic, tally_answers, unique
from tidemq.client import api
from tidemq.nsq.protocol import MAGIC_V2, encode_command
from tidemq.record import BatchItem, encode_batch, encode_properties
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.frame import encode

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900 if LONG else 300)]

#: The bound on the server's peak anonymous memory (RssAnon) during any case, with default limits. VmRSS,
#: the table's column, also counts the pages of the commit log the store maps, which grow with what was
#: written and read (600 MiB in case 1) and which the kernel takes back under pressure: it is reported, not
#: bounded.
RSS_BOUND_MB = 512.0
MIB = 1024 * 1024


def size(short: int, long: int) -> int:
    return long if LONG else short


@dataclass
class Abuse:
    server: ServerProcess
    canary: ThreadedCanary
    rocket_offset: int = 0
    log_lines: list[int] = field(default_factory=list)


@pytest.fixture(scope="module")
def abuse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Abuse]:
    server = ServerProcess(tmp_path_factory.mktemp("abuse") / "data").start()
    rocket_topic = unique("canaryrmq")
    asyncio.run(create_topic(server.broker, rocket_topic, queues=1))
    canary = ThreadedCanary(server, rocket_topic).start()
    time.sleep(0.5)
    yield Abuse(server, canary)
    canary.stop()
    server.stop()


def log_lines(server: ServerProcess) -> int:
    return server.log_path.read_bytes().count(b"\n")


class Case:
    """One abuse case's window: what the canary and the sampler saw between ``__init__`` and ``finish``."""

    def __init__(self, abuse: Abuse, scenario: str) -> None:
        self.abuse, self.scenario = abuse, scenario
        self.start = time.monotonic()
        self.log_start = log_lines(abuse.server)

    async def finish(self, acknowledged: int, lost: int, note: str) -> tuple[Row, float]:
        """Report the row; check the canary's RocketMQ sends of the window were stored, and every hard
        bound (lost, crash, RSS). The stall is returned for the caller to check."""
        await asyncio.sleep(0.3)
        end = time.monotonic()
        abuse, server = self.abuse, self.abuse.server
        rounds, worst, peak, anon = abuse.canary.window(self.start, end)
        client = await RawClient.open(server.broker)
        try:
            stored: set[bytes] = set()
            while True:
                answer, msgs = await client.pull(
                    abuse.canary.rocket_topic, 0, abuse.rocket_offset, timeout=30
                )
                if not msgs:
                    break
                stored.update(m.body for m in msgs)
                abuse.rocket_offset = int(answer.ext_fields["nextBeginOffset"])
            info = await client.call(RequestCode.GET_BROKER_RUNTIME_INFO, timeout=30)
            lag = orjson.loads(info.body)["table"].get("loopLagMaxMs")
        finally:
            client.close()
        canary_lost = sum(1 for *_, body in rounds if body not in stored)
        alive = server.proc is not None and server.proc.poll() is None
        log = log_lines(server) - self.log_start
        row = report(
            Row(
                self.scenario,
                len(rounds) + acknowledged,
                lost + canary_lost,
                0,
                stalls=f"{worst * 1000:.0f} ms",
                peak_rss_mb=peak,
                note=f"{note}; {len(rounds)} canary rounds; peak RssAnon {anon:.0f} MB; server's worst loop "
                f"lag since start {lag} ms; {log} server log lines" + ("" if alive else "; SERVER DIED"),
            )
        )
        assert abuse.canary.error is None, f"the canary failed: {abuse.canary.error!r}"
        assert alive, "the server died"
        assert rounds, "the canary finished no round during the case"
        assert row.lost == 0, f"{row.lost} acknowledged messages never consumed"
        assert anon < RSS_BOUND_MB, (
            f"peak RssAnon {anon:.0f} MB (VmRSS {peak:.0f} MB) over the {RSS_BOUND_MB:.0f} MB bound"
        )
        return row, worst * 1000


def check_stall(worst_ms: float, what: str) -> None:
    assert worst_ms < STALL_BOUND_MS, f"the canary stalled {worst_ms:.0f} ms behind {what}"


def http_post(server: ServerProcess, path: str, body: bytes = b"", timeout: float = 120) -> bytes:
    request = urllib.request.Request(f"http://{server.nsqd_http}{path}", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return bytes(answer.read())


def http_get(server: ServerProcess, path: str) -> bytes:
    with urllib.request.urlopen(f"http://{server.nsqd_http}{path}", timeout=30) as answer:
        return bytes(answer.read())


async def post(server: ServerProcess, path: str, body: bytes = b"") -> bytes:
    return await asyncio.to_thread(http_post, server, path, body)


async def test_idle_channel_fed_1_mib_messages(abuse: Abuse) -> None:
    """Finding 1: an idle channel fed N x 1 MiB, then drained in order."""
    count, server = size(100, 600), abuse.server
    topic = unique("idle")
    await post(server, f"/topic/create?topic={topic}")
    await post(server, f"/channel/create?topic={topic}&channel=idle")
    payload = b"x" * (MIB - 8)
    case = Case(abuse, f"idle NSQ channel fed {count} x 1 MiB, then drained")
    producer = await RawNsq.open(server.nsqd)
    acked = 0
    for start in range(0, count, 20):
        for i in range(start, start + 20):
            producer.send("PUB", topic, body=b"%08d" % i + payload)
        for _ in range(20):
            acked += await producer.response(60) == b"OK"
    producer.close()
    got, bodies = await count_nsq_messages(server.nsqd, topic, "idle", count, 120, keep=True)
    order = [int(b[:8]) for b in bodies]
    _, worst = await case.finish(
        acked, acked - len(set(order)), f"{got} drained, in order: {order == sorted(order)}"
    )
    assert order == list(range(count))
    check_stall(worst, "an idle channel's 1 MiB messages")


async def test_tcp_mpub_of_tiny_messages(abuse: Abuse) -> None:
    """Finding 2: one TCP MPUB of N x 1 B (1,000,000 is 5,000,004 bytes, under --max-body-size 5 MiB)."""
    count, server = size(100_000, 1_000_000), abuse.server
    topic = unique("mpub")
    await post(server, f"/topic/create?topic={topic}")
    await post(server, f"/channel/create?topic={topic}&channel=c")
    body = struct.pack(">i", count) + (struct.pack(">i", 1) + b"m") * count
    frame = b"MPUB " + topic.encode() + b"\n" + struct.pack(">i", len(body)) + body
    case = Case(abuse, f"TCP MPUB of {count:,} x 1 B, then consumed")
    publisher = await RawNsq.open(server.nsqd)
    publisher.send_raw(frame)
    ok = await publisher.response(120) == b"OK"
    publisher.close()
    acked = count if ok else 0
    got, _ = await count_nsq_messages(server.nsqd, topic, "c", acked, 300)
    _, worst = await case.finish(
        acked, max(acked - got, 0), f"MPUB answered {'OK' if ok else 'an error'}; {got} consumed"
    )
    assert ok
    check_stall(worst, f"a TCP MPUB of {count:,}")


async def test_http_mpub_of_tiny_lines(abuse: Abuse) -> None:
    """Finding 2: HTTP /mpub of N one-byte lines. 2,500,000 ``m\\n`` lines are 5,000,000 bytes, under nsqd's
    default --max-body-size (5,242,880), so the issue's full size is accepted, not refused."""
    count, server = size(250_000, 2_500_000), abuse.server
    topic = unique("hmpub")
    await post(server, f"/topic/create?topic={topic}")
    await post(server, f"/channel/create?topic={topic}&channel=c")
    body = b"m\n" * count
    case = Case(abuse, f"HTTP /mpub of {count:,} lines ({len(body):,} B), then consumed")
    answer = await post(server, f"/mpub?topic={topic}", body)
    acked = count if answer == b"OK" else 0
    got, _ = await count_nsq_messages(server.nsqd, topic, "c", acked, 600)
    _, worst = await case.finish(
        acked, max(acked - got, 0), f"/mpub answered {answer[:40]!r}; {got} consumed"
    )
    assert answer == b"OK"
    check_stall(worst, f"an HTTP /mpub of {count:,} lines")


async def test_rocketmq_send_batch_of_4_mib(abuse: Abuse) -> None:
    """Finding 2: a 4 MiB SEND_BATCH_MESSAGE of 1-byte messages, each with its UNIQ_KEY as a RocketMQ
    producer packs them (about 61,000), then pulled back."""
    server = abuse.server
    topic = unique("batch")
    await create_topic(server.broker, topic, queues=1)

    def item(i: int) -> BatchItem:
        return BatchItem(0, b"m", encode_properties({"UNIQ_KEY": f"{i:032X}"}))

    count = (4 * MIB - 1024) // len(encode_batch([item(0)]))
    body = encode_batch([item(i) for i in range(count)])
    header = api.send_header(topic, queue_id=0, properties="", producer_group="PG", batch=True)
    case = Case(abuse, f"RocketMQ SEND_BATCH of {count:,} x 1 B (4 MiB), then pulled")
    client = await RawClient.open(server.broker)
    answer = await client.conn.invoke(api.send_request(header, body), 120.0)
    acked = count if answer.code == ResponseCode.SUCCESS else 0
    keys: set[str] = set()
    offset = 0
    while True:
        resp, msgs = await client.pull(topic, 0, offset, timeout=30)
        if not msgs:
            break
        keys.update(m.properties.get("UNIQ_KEY", "") for m in msgs)
        offset = int(resp.ext_fields["nextBeginOffset"])
    client.close()
    _, worst = await case.finish(
        acked, acked - len(keys), f"batch answered {answer.code}; {len(keys)} pulled"
    )
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    check_stall(worst, "a 4 MiB SEND_BATCH")


def pull_frame(topic: str, *, offset: int, suspend_ms: int) -> bytes:
    header = api.pull_header("G_abuse", topic, 0, offset, max_nums=32, suspend_ms=suspend_ms)
    return encode(RemotingCommand(RequestCode.PULL_MESSAGE, opaque=1, ext_fields=header.to_ext()))


async def test_suspended_pulls_on_one_socket_then_closed(abuse: Abuse) -> None:
    """Finding 3: N suspended PULL_MESSAGE on one socket (the broker holds 10,000 per connection and
    answers the rest SYSTEM_BUSY), then the socket is closed."""
    total, server = size(20_000, 200_000), abuse.server
    topic = unique("held")
    await create_topic(server.broker, topic, queues=1)
    batch = pull_frame(topic, offset=0, suspend_ms=120_000) * 2_000
    case = Case(abuse, f"{total:,} suspended pulls on one socket, then closed")
    host, port = server.broker.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    answers: dict[int, int] = {}
    reading = asyncio.create_task(tally_answers(reader, answers))
    for _ in range(0, total, 2_000):
        writer.write(batch)
        await writer.drain()
    deadline = time.monotonic() + 120
    while sum(answers.values()) < total - 10_000 and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    busy = answers.get(ResponseCode.SYSTEM_BUSY, 0)
    writer.close()
    reading.cancel()
    await asyncio.sleep(1.0)  # the teardown of the held pulls happens in this window
    _, worst = await case.finish(0, 0, f"{busy:,} refused SYSTEM_BUSY, {total - busy:,} held until closed")
    assert busy == total - 10_000, answers
    check_stall(worst, f"{total:,} held pulls and their teardown")


async def test_clients_that_never_read(abuse: Abuse) -> None:
    """Finding 6: a remoting client pipelining pulls of 1 MiB messages that never reads its answers, and an
    NSQ subscriber (RDY 2500) of 64 KiB messages that never reads; then a reading consumer takes all."""
    server = abuse.server
    rtopic, ntopic = unique("noread"), unique("noread")
    nsq_count, rocket_count = size(500, 3000), 32
    await create_topic(server.broker, rtopic, queues=1)
    await post(server, f"/topic/create?topic={ntopic}")
    for channel in ("slow", "fast"):
        await post(server, f"/channel/create?topic={ntopic}&channel={channel}")
    case = Case(
        abuse, f"never-reading clients: 2,000 pipelined pulls of 1 MiB; NSQ RDY 2500 of {nsq_count} x 64 KiB"
    )
    producer = await RawClient.open(server.broker)
    acked = 0
    for i in range(rocket_count):
        acked += (await producer.send(rtopic, b"%08d" % i + b"x" * (MIB - 1032))).code == ResponseCode.SUCCESS
    publisher = await RawNsq.open(server.nsqd)
    for _ in range(0, nsq_count, 50):
        acked += 50 * (await publisher.mpub(ntopic, [b"s" * 65536] * 50) == b"OK")
    publisher.close()
    host, port = server.broker.rsplit(":", 1)
    _reader, rwriter = await asyncio.open_connection(host, int(port), limit=1024)
    rwriter.write(pull_frame(rtopic, offset=0, suspend_ms=0) * 2_000)
    host, port = server.nsqd.rsplit(":", 1)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
    _, nwriter = await asyncio.open_connection(sock=sock, limit=4096)
    nwriter.write(MAGIC_V2 + encode_command("SUB", ntopic, "slow") + encode_command("RDY", "2500"))
    await asyncio.sleep(4.0)
    got, _ = await count_nsq_messages(server.nsqd, ntopic, "fast", nsq_count, 120)
    pulled = await producer.drain(rtopic, 0)
    producer.close()
    rwriter.transport.abort()
    nwriter.transport.abort()
    lost = (nsq_count - got) + (rocket_count - len({m.body[:8] for m in pulled}))
    _, worst = await case.finish(acked, lost, f"{got} NSQ + {len(pulled)} RocketMQ consumed by readers")
    check_stall(worst, "clients that never read")


MALFORMED_REMOTING = [
    (RequestCode.HEART_BEAT, b"[]"),
    (RequestCode.HEART_BEAT, b"null"),
    (RequestCode.HEART_BEAT, b"1"),
    (RequestCode.LOCK_BATCH_MQ, b"null"),
    (RequestCode.UNLOCK_BATCH_MQ, b"{}"),
    (RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, b"{}"),
]


def http_exchange(hostport: str, request: bytes, leave: bool = False) -> bytes:
    host, port = hostport.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        if leave:
            return b""
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return data


def malformed_http(hostport: str, rounds: int) -> dict[int, int]:
    statuses: dict[int, int] = {}
    long_path = b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    gzip = (
        b"POST /pub?topic=gz HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: 5\r\n"
        b"Connection: close\r\n\r\nhello"
    )
    leaving = b"POST /pub?topic=t HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\nhello"
    for _ in range(rounds):
        for request in (long_path, gzip):
            answer = http_exchange(hostport, request)
            status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.") else 0
            statuses[status] = statuses.get(status, 0) + 1
        http_exchange(hostport, leaving, leave=True)
    return statuses


async def test_malformed_bodies_and_requests(abuse: Abuse) -> None:
    """Finding 7: malformed bodies on remoting codes 34, 41, 42, 200 and malformed HTTP requests (a
    9,000-byte path, gzip Content-Encoding over a plain body, a client leaving mid-body): protocol errors,
    and the server's log stays short (its lines are counted in the note)."""
    rounds, server = size(50, 1000), abuse.server
    case = Case(abuse, f"malformed: {rounds} x 6 remoting bodies, {rounds} x 3 HTTP requests on 2 ports")
    client = await RawClient.open(server.broker)
    codes: dict[int, int] = {}
    for _ in range(rounds):
        for code, body in MALFORMED_REMOTING:
            answer = await client.call(code, body=body, timeout=30)
            codes[answer.code] = codes.get(answer.code, 0) + 1
    client.close()
    statuses: dict[int, int] = {}
    for port in (server.nsqd_http, server.lookupd_http):
        for status, n in (await asyncio.to_thread(malformed_http, port, rounds)).items():
            statuses[status] = statuses.get(status, 0) + n
    await asyncio.sleep(1.2)  # a rate-limited log writes its suppressed count a second later
    text = server.log_path.read_text(errors="replace")
    _, worst = await case.finish(0, 0, f"remoting answers {codes}, HTTP statuses {statuses}")
    assert "Traceback" not in text, text[-2000:]
    check_stall(worst, "malformed requests")


def open_idle(hostport: str, count: int) -> tuple[int, int, int]:
    """``count`` connections from 127.0.0.2, .3, ... (1,250 each: 250 past the default per-IP cap), held
    1 s: how many the server kept, refused (answered 503 and closed) and closed as idle (opening 18,000
    takes longer than the 60 s idle timeout), then all closed."""
    host, port = hostport.rsplit(":", 1)
    socks = []
    try:
        for i in range(count):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.bind((f"127.0.0.{2 + i // 1250}", 0))
            sock.settimeout(10)
            sock.connect((host, int(port)))
            socks.append(sock)
        time.sleep(1.0)
        refused = idle_closed = 0
        for sock in socks:
            sock.setblocking(False)  # a timeout would make recv wait for data first
            try:
                answered = sock.recv(1, socket.MSG_PEEK)
            except BlockingIOError:
                continue
            except OSError:
                answered = b""
            refused += bool(answered)
            idle_closed += not answered
        return count - refused - idle_closed, refused, idle_closed
    finally:
        for sock in socks:
            sock.close()


async def test_idle_http_connections(abuse: Abuse) -> None:
    """Finding 8: N idle connections on the NSQ HTTP port, then closed; the default caps (1,000 per IP,
    10,000 in total) refuse some."""
    count, server = size(2_500, 18_000), abuse.server
    case = Case(abuse, f"{count:,} idle connections on the NSQ HTTP port, then closed")
    kept, refused, idle_closed = await asyncio.to_thread(open_idle, server.nsqd_http, count)
    await asyncio.sleep(1.0)
    ping = await asyncio.to_thread(http_get, server, "/ping")
    _, worst = await case.finish(
        0, 0, f"{kept:,} kept, {refused:,} refused by the caps, {idle_closed:,} closed idle"
    )
    assert ping == b"OK"
    assert refused > 0
    check_stall(worst, f"{count:,} idle connections")
