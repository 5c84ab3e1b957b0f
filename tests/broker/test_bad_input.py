"""Malformed and hostile input against a real ``tidemq server`` process, over raw loopback sockets.

Every test attacks one connection and then proves, on a *separate* connection, that the server still
sends and pulls, and that nothing acknowledged before (the module's ledger) has been lost. Every loop is
bounded in count and in time; a server that hangs fails an assertion instead of stalling the suite.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import json
import os
import signal
import socket
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support import RawClient, ServerProcess, run
from tidemq.record import MessageDecodeError
from tidemq.remoting.codes import RequestCode, ResponseCode

BASELINE_TOPIC = "BadInputBaseline"
HEALTH_TOPIC = "BadInputHealth"
MAX_MESSAGE_SIZE = 4 * 1024 * 1024
MAX_FRAME = 16 * 1024 * 1024

# A hung server fails the test instead of stalling the suite.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

_opaques = itertools.count(1000)


# --- raw wire helpers (independent of the encoder/decoder under test) ----------------------------------


def frame(header: bytes | dict[str, Any], body: bytes = b"", stype: int = 0) -> bytes:
    """One frame built by hand: length, serialize-type/header-length word, header, body (spec 1.2)."""
    if isinstance(header, dict):
        header = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack(">iI", 4 + len(header) + len(body), (stype << 24) | len(header)) + header + body


def request(
    code: Any,
    ext: dict[str, str] | None = None,
    body: bytes = b"",
    *,
    opaque: int | None = None,
    flag: int = 0,
) -> tuple[int, bytes]:
    """A JSON request as a Java 4.9.8 client writes it; returns (opaque, frame bytes)."""
    opaque = next(_opaques) if opaque is None else opaque
    header: dict[str, Any] = {
        "code": code,
        "language": "JAVA",
        "version": 409,
        "opaque": opaque,
        "flag": flag,
    }
    if ext is not None:
        header["extFields"] = ext
    return opaque, frame(header, body)


def binary_request(code: int, ext: dict[str, str], opaque: int) -> bytes:
    """A ROCKETMQ (serialize type 1) request, laid out as in spec 1.5."""
    ext_bytes = b"".join(
        struct.pack(">h", len(k.encode())) + k.encode() + struct.pack(">i", len(v.encode())) + v.encode()
        for k, v in ext.items()
    )
    header = (
        struct.pack(">hbhiii", code, 0, 409, opaque, 0, 0) + struct.pack(">i", len(ext_bytes)) + ext_bytes
    )
    return frame(header, stype=1)


def parse_binary_header(data: bytes) -> dict[str, Any]:
    code, language, version, opaque, flag, remark_len = struct.unpack_from(">hbhiii", data, 0)
    pos = 17
    remark = data[pos : pos + remark_len].decode() if remark_len else None
    pos += remark_len
    (ext_len,) = struct.unpack_from(">i", data, pos)
    pos += 4
    end = pos + ext_len
    ext: dict[str, str] = {}
    while pos < end:
        (klen,) = struct.unpack_from(">h", data, pos)
        key = data[pos + 2 : pos + 2 + klen].decode()
        pos += 2 + klen
        (vlen,) = struct.unpack_from(">i", data, pos)
        ext[key] = data[pos + 4 : pos + 4 + vlen].decode()
        pos += 4 + vlen
    assert pos == end == len(data), "binary header has trailing or missing bytes"
    header = {"code": code, "language": language, "version": version, "opaque": opaque, "flag": flag}
    if remark is not None:
        header["remark"] = remark
    if ext:
        header["extFields"] = ext
    return header


@dataclass
class Frame:
    stype: int
    header: dict[str, Any]
    body: bytes

    @property
    def code(self) -> int:
        return int(self.header["code"])

    @property
    def opaque(self) -> int:
        return int(self.header["opaque"])

    @property
    def remark(self) -> str:
        return str(self.header.get("remark") or "")

    @property
    def ext(self) -> dict[str, str]:
        return dict(self.header.get("extFields") or {})


_CLOSED_ERRNOS = {errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED}


@dataclass
class Wire:
    """One raw TCP connection to the server, driven byte by byte."""

    port: int
    rcvbuf: int | None = None
    sock: socket.socket = field(init=False)
    buf: bytearray = field(init=False, default_factory=bytearray)

    def __post_init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if self.rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)
        self.sock.settimeout(3.0)
        self.sock.connect(("127.0.0.1", self.port))

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _recv(self, deadline: float) -> bytes | None:
        """Some bytes, b"" on timeout, or None when the peer closed (FIN or RST)."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return b""
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return b""
        except OSError as exc:
            if exc.errno in _CLOSED_ERRNOS:
                return None
            raise
        return data if data else None

    def _take_frame(self) -> Frame | None:
        if len(self.buf) < 4:
            return None
        (length,) = struct.unpack_from(">i", self.buf, 0)
        assert 4 <= length <= MAX_FRAME, f"server wrote a frame of length {length}"
        if len(self.buf) < 4 + length:
            return None
        (word,) = struct.unpack_from(">I", self.buf, 4)
        stype, hdr_len = word >> 24, word & 0xFFFFFF
        header = bytes(self.buf[8 : 8 + hdr_len])
        body = bytes(self.buf[8 + hdr_len : 4 + length])
        del self.buf[: 4 + length]
        assert stype in (0, 1), f"server answered with serialize type {stype}"
        parsed = json.loads(header) if stype == 0 else parse_binary_header(header)
        return Frame(stype, parsed, body)

    def read_frame(self, timeout: float = 3.0) -> Frame | None:
        """The next frame from the server, or None if it closed the connection first."""
        deadline = time.monotonic() + timeout
        while True:
            got = self._take_frame()
            if got is not None:
                return got
            data = self._recv(deadline)
            if data is None:
                return None
            if not data:
                raise AssertionError(f"no frame and no close within {timeout}s")
            self.buf += data

    def call(self, data: bytes, opaque: int, timeout: float = 3.0) -> Frame:
        self.send(data)
        resp = self.read_frame(timeout)
        assert resp is not None, "server closed a connection that should have stayed usable"
        assert resp.opaque == opaque, resp.header
        assert resp.header["flag"] & 1, resp.header
        return resp

    def expect_closed(self, timeout: float = 3.0) -> list[Frame]:
        """Wait (bounded) for the server to close; returns any frames it wrote before closing."""
        deadline = time.monotonic() + timeout
        frames: list[Frame] = []
        while True:
            data = self._recv(deadline)
            if data is None:
                break
            if not data:
                raise AssertionError(f"server did not close the connection within {timeout}s")
            self.buf += data
            while (got := self._take_frame()) is not None:
                frames.append(got)
        return frames

    def expect_silence(self, seconds: float) -> None:
        data = self._recv(time.monotonic() + seconds)
        assert data == b"", f"expected no answer, got {data!r}"


# --- requests as real clients write them -------------------------------------------------------------


def pull_ext(topic: str, queue_id: int, offset: int, max_nums: int = 32) -> dict[str, str]:
    return {
        "consumerGroup": "BadInputCG",
        "topic": topic,
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": str(max_nums),
        "sysFlag": "4",
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subVersion": "0",
        "subscription": "*",
        "expressionType": "TAG",
    }


def send_v2_ext(topic: str, queue_id: int = 0) -> dict[str, str]:
    return {
        "a": "BadInputPG",
        "b": topic,
        "c": "TBW102",
        "d": "4",
        "e": str(queue_id),
        "f": "0",
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": "",
        "j": "0",
        "k": "false",
        "m": "false",
    }


# --- the ledger of acknowledged messages and the "everyone else is fine" check -------------------------


@dataclass
class Ledger:
    """Every message the server acknowledged in this module: (topic, queue) -> bodies in order."""

    acked: dict[tuple[str, int], list[bytes]] = field(default_factory=dict)

    def add(self, topic: str, queue_id: int, body: bytes) -> None:
        self.acked.setdefault((topic, queue_id), []).append(body)


async def _drain(c: RawClient, topic: str, queue_id: int) -> list[bytes]:
    # bounded: the ledger queues hold a few dozen messages at most
    return [m.body for m in await c.drain(topic, queue_id, group="BadInputVerifier", max_pulls=100)]


def others_are_served(server: ServerProcess, ledger: Ledger, budget: float = 3.0) -> None:
    """A fresh connection sends and pulls promptly, and every acknowledged message is still there."""
    assert server.proc is not None and server.proc.poll() is None, "server process died"

    async def check() -> None:
        started = time.monotonic()
        c = await RawClient.open(server.broker)
        try:
            body = f"health-{time.monotonic_ns()}".encode()
            sent = await c.send(HEALTH_TOPIC, body, queue_id=0)
            assert sent.code == ResponseCode.SUCCESS, sent
            ledger.add(HEALTH_TOPIC, 0, body)
            resp, msgs = await c.pull(HEALTH_TOPIC, 0, sent.queue_offset, max_nums=1)
            assert resp.code == ResponseCode.SUCCESS, resp
            assert [m.body for m in msgs] == [body]
            for (topic, queue_id), bodies in ledger.acked.items():
                assert await _drain(c, topic, queue_id) == bodies, f"acknowledged messages lost in {topic}"
            ns = await RawClient.open(server.namesrv)
            try:
                info = await ns.call(RequestCode.GET_BROKER_CLUSTER_INFO)
                assert info.code == ResponseCode.SUCCESS, info
            finally:
                ns.close()
        finally:
            c.close()
        elapsed = time.monotonic() - started
        assert elapsed < budget, f"health check took {elapsed:.2f}s"

    run(check())


@pytest.fixture(scope="module")
def ledger(server: ServerProcess) -> Ledger:
    """A few messages acknowledged before any attack; every test proves they can still be pulled."""
    book = Ledger()

    async def seed() -> None:
        c = await RawClient.open(server.broker)
        for i in range(6):
            body = f"baseline-{i}".encode()
            sent = await c.send(BASELINE_TOPIC, body, queue_id=i % 3)
            assert sent.code == ResponseCode.SUCCESS, sent
            book.add(BASELINE_TOPIC, i % 3, body)
        c.close()

    run(seed())
    return book


def _port(server: ServerProcess, which: str) -> int:
    return server.broker_port if which == "broker" else server.namesrv_port


LISTENERS = pytest.mark.parametrize("which", ["broker", "namesrv"])


# --- 1-3, 5: framing the server cannot trust -> the connection is closed --------------------------------


@LISTENERS
@pytest.mark.parametrize("length", [0x7FFFFFFF, MAX_FRAME + 1, -1, 0, 3])
def test_frame_length_out_of_range_closes_at_once(
    server: ServerProcess, ledger: Ledger, which: str, length: int
) -> None:
    with Wire(_port(server, which)) as w:
        # Only the prefix and a few bytes: the server must decide on the length field alone,
        # not wait for (or buffer) 2 GiB / 16 MiB that will never come.
        started = time.monotonic()
        w.send(struct.pack(">iI", length, 20) + b'{"code":10,"opaque":1')
        assert w.expect_closed(timeout=2.0) == []
        assert time.monotonic() - started < 2.0
    others_are_served(server, ledger)


@LISTENERS
def test_header_length_beyond_frame_closes(server: ServerProcess, ledger: Ledger, which: str) -> None:
    with Wire(_port(server, which)) as w:
        header = b'{"code":105,"opaque":1}'
        # frame says 4 + 10 bytes follow, the header-length word claims 100 (and 0xFFFFFF)
        w.send(struct.pack(">iI", 4 + 10, 100) + header[:10])
        assert w.expect_closed() == []
    with Wire(_port(server, which)) as w:
        w.send(struct.pack(">iI", 4 + len(header), 0xFFFFFF) + header)
        assert w.expect_closed() == []
    others_are_served(server, ledger)


@LISTENERS
@pytest.mark.parametrize(
    ("header", "stype"),
    [
        (b"\xff\xfe\x00garbage{{", 0),  # not UTF-8, not JSON
        (b'{"code":105,"opaque":', 0),  # truncated JSON
        (b"[105, 1]", 0),  # JSON, but not an object
        (b"", 0),  # empty header
        (b"\x00\x69\x00", 1),  # binary header cut inside its fixed part
    ],
    ids=["garbage", "truncated-json", "json-array", "empty", "short-binary"],
)
def test_unreadable_header_closes(
    server: ServerProcess, ledger: Ledger, which: str, header: bytes, stype: int
) -> None:
    with Wire(_port(server, which)) as w:
        w.send(frame(header, stype=stype))
        assert w.expect_closed() == []  # no opaque to answer to
    others_are_served(server, ledger)


@LISTENERS
def test_unknown_serialize_type_is_closed_or_refused(
    server: ServerProcess, ledger: Ledger, which: str
) -> None:
    with Wire(_port(server, which)) as w:
        w.send(frame({"code": 105, "opaque": 5, "flag": 0, "extFields": {"topic": "T"}}, stype=7))
        frames = w.expect_closed()
        assert all(f.code != ResponseCode.SUCCESS and f.opaque == 5 for f in frames), frames
    others_are_served(server, ledger)


# --- 4: readable opaque, wrong types -> SYSTEM_ERROR, connection stays usable --------------------------


@pytest.mark.parametrize(
    ("header", "named"),
    [
        ({"code": "abc", "opaque": 41, "flag": 0}, "code"),
        ({"code": 30.5, "opaque": 42, "flag": 0}, "code"),
        ({"opaque": 43, "flag": 0}, "code"),
        ({"code": 30, "opaque": 44, "flag": 0, "version": "v4"}, "version"),
        ({"code": 30, "opaque": 45, "flag": 0, "extFields": [1, 2]}, "extFields"),
        ({"code": 30, "opaque": 46, "flag": 0, "extFields": "topic=T"}, "extFields"),
    ],
    ids=["code-string", "code-float", "code-missing", "version-string", "ext-list", "ext-string"],
)
def test_wrong_header_types_answer_system_error(
    server: ServerProcess, ledger: Ledger, header: dict[str, Any], named: str
) -> None:
    with Wire(server.broker_port) as w:
        resp = w.call(frame(header), header["opaque"])
        assert resp.code == ResponseCode.SYSTEM_ERROR, resp.header
        assert named in resp.remark, resp.remark
        # the stream is still in sync: the same connection serves a correct request next
        opaque, good = request(RequestCode.GET_MAX_OFFSET, {"topic": BASELINE_TOPIC, "queueId": "0"})
        resp = w.call(good, opaque)
        assert resp.code == ResponseCode.SUCCESS and resp.ext["offset"] == "2", resp.header
    others_are_served(server, ledger)


def test_wrong_header_types_on_oneway_get_no_answer(server: ServerProcess, ledger: Ledger) -> None:
    with Wire(server.broker_port) as w:
        w.send(frame({"code": "abc", "opaque": 51, "flag": 2}))
        opaque, good = request(RequestCode.GET_MAX_OFFSET, {"topic": BASELINE_TOPIC, "queueId": "0"})
        resp = w.call(good, opaque)  # the first frame back answers the good request, not the oneway
        assert resp.code == ResponseCode.SUCCESS
        w.expect_silence(0.3)
    others_are_served(server, ledger)


# --- 6: unknown request code ----------------------------------------------------------------------------


@LISTENERS
def test_unknown_request_code(server: ServerProcess, ledger: Ledger, which: str) -> None:
    with Wire(_port(server, which)) as w:
        opaque, data = request(9999, {"topic": "T"})
        resp = w.call(data, opaque)
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED, resp.header
        assert "9999" in resp.remark, resp.remark
        # oneway-flagged unknown code: no answer at all
        w.send(request(9998, opaque=777, flag=2)[1])
        opaque, data = request(9997)
        resp = w.call(data, opaque)  # first answer after the oneway must be this one, not opaque 777
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "9997" in resp.remark
        w.expect_silence(0.3)
    others_are_served(server, ledger)


# --- 7: missing or unparsable required extFields --------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "ext", "named"),
    [
        (
            RequestCode.PULL_MESSAGE,
            {k: v for k, v in pull_ext(BASELINE_TOPIC, 0, 0).items() if k != "queueId"},
            "queueId",
        ),
        (RequestCode.PULL_MESSAGE, {**pull_ext(BASELINE_TOPIC, 0, 0), "queueOffset": "0x10"}, "queueOffset"),
        (
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": "G", "topic": BASELINE_TOPIC, "queueId": "x"},
            "queueId",
        ),
        (RequestCode.QUERY_CONSUMER_OFFSET, {"topic": BASELINE_TOPIC, "queueId": "0"}, "consumerGroup"),
        (RequestCode.GET_MAX_OFFSET, None, "topic"),
        (
            RequestCode.SEND_MESSAGE_V2,
            {k: v for k, v in send_v2_ext(HEALTH_TOPIC).items() if k != "e"},
            "queueId",
        ),
        # Java parses these as Integer: a value past int32 is as unparsable as "x" (spec 1.4)
        (RequestCode.SEND_MESSAGE_V2, {**send_v2_ext(HEALTH_TOPIC), "h": str(1 << 40)}, "flag"),
        (RequestCode.SEND_MESSAGE_V2, {**send_v2_ext(HEALTH_TOPIC), "j": str(1 << 40)}, "reconsumeTimes"),
    ],
    ids=[
        "pull-no-queueId",
        "pull-hex-offset",
        "query-offset-queueId-x",
        "query-offset-no-group",
        "maxoffset-no-ext",
        "send-no-queueId",
        "send-flag-over-int32",
        "send-reconsumeTimes-over-int32",
    ],
)
def test_bad_required_ext_fields_answer_system_error(
    server: ServerProcess, ledger: Ledger, code: int, ext: dict[str, str] | None, named: str
) -> None:
    with Wire(server.broker_port) as w:
        opaque, data = request(code, ext, b"x" if code == RequestCode.SEND_MESSAGE_V2 else b"")
        resp = w.call(data, opaque)
        assert resp.code == ResponseCode.SYSTEM_ERROR, resp.header
        assert named in resp.remark, resp.remark
        opaque, good = request(RequestCode.GET_MAX_OFFSET, {"topic": BASELINE_TOPIC, "queueId": "1"})
        assert w.call(good, opaque).code == ResponseCode.SUCCESS
    others_are_served(server, ledger)


# --- 8: ROCKETMQ binary headers are answered in kind -----------------------------------------------------


def test_binary_header_request_gets_binary_answer(server: ServerProcess, ledger: Ledger) -> None:
    with Wire(server.broker_port) as w:
        w.send(binary_request(RequestCode.GET_MAX_OFFSET, {"topic": BASELINE_TOPIC, "queueId": "1"}, 4242))
        resp = w.read_frame()
        assert resp is not None, "server closed a binary-header connection"
        assert resp.stype == 1, "answer to a ROCKETMQ request must be ROCKETMQ too (spec 1.9, Java >= 4.9.4)"
        assert (resp.code, resp.opaque, resp.header["flag"] & 1) == (ResponseCode.SUCCESS, 4242, 1)
        assert resp.ext["offset"] == str(len(ledger.acked[(BASELINE_TOPIC, 1)]))
        # an unknown code in binary is refused in binary, too
        w.send(binary_request(9999, {}, 4243))
        resp = w.read_frame()
        assert resp is not None and resp.stype == 1
        assert (resp.code, resp.opaque) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, 4243)
        assert "9999" in resp.remark
    others_are_served(server, ledger)


# --- 9: oversized message body ---------------------------------------------------------------------------


def test_body_over_max_message_size_is_message_illegal(server: ServerProcess, ledger: Ledger) -> None:
    with Wire(server.broker_port) as w:
        opaque, data = request(
            RequestCode.SEND_MESSAGE_V2, send_v2_ext("BadInputHuge"), b"\xab" * (MAX_MESSAGE_SIZE + 1)
        )
        resp = w.call(data, opaque, timeout=5.0)
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL, resp.header
        assert str(MAX_MESSAGE_SIZE) in resp.remark, resp.remark
        opaque, good = request(RequestCode.GET_MAX_OFFSET, {"topic": "BadInputHuge", "queueId": "0"})
        resp = w.call(good, opaque)
        assert resp.code == ResponseCode.SUCCESS and resp.ext["offset"] == "0", "the huge message was stored"
    others_are_served(server, ledger)


# --- 10: half-closed and stalled peers -----------------------------------------------------------------


def test_half_closed_client_does_not_disturb_others(server: ServerProcess, ledger: Ledger) -> None:
    for _ in range(3):
        with Wire(server.broker_port) as w:
            opaque, data = request(RequestCode.GET_MAX_OFFSET, {"topic": BASELINE_TOPIC, "queueId": "0"})
            w.send(data)
            w.sock.shutdown(socket.SHUT_WR)
            # Java (Netty, no half-closure) closes on EOF; answering first is fine too. Hanging is not.
            frames = w.expect_closed()
            assert all(f.opaque == opaque and f.code == ResponseCode.SUCCESS for f in frames), frames
    with Wire(server.broker_port) as w:  # half-close with a partial frame pending
        w.send(request(RequestCode.GET_MAX_OFFSET, {"topic": BASELINE_TOPIC, "queueId": "0"})[1][:12])
        w.sock.shutdown(socket.SHUT_WR)
        assert w.expect_closed() == []
    # half-close while a long-polling pull is held for this connection; then a message arrives for it
    topic = "BadInputLongPoll"
    with Wire(server.broker_port) as w:
        opaque, data = request(RequestCode.SEND_MESSAGE_V2, send_v2_ext(topic), b"lp-0")
        assert w.call(data, opaque).code == ResponseCode.SUCCESS
        ledger.add(topic, 0, b"lp-0")
        held = {**pull_ext(topic, 0, 1), "sysFlag": "6", "suspendTimeoutMillis": "5000"}
        opaque, data = request(RequestCode.PULL_MESSAGE, held)
        w.send(data)
        time.sleep(0.1)  # let the server park the pull
        w.sock.shutdown(socket.SHUT_WR)
        frames = w.expect_closed()
        assert all(f.opaque == opaque for f in frames), frames
    with Wire(server.broker_port) as w:
        opaque, data = request(RequestCode.SEND_MESSAGE_V2, send_v2_ext(topic), b"lp-1")
        assert w.call(data, opaque).code == ResponseCode.SUCCESS  # wakes the orphaned hold
        ledger.add(topic, 0, b"lp-1")
    others_are_served(server, ledger)


def test_partial_frames_that_stall_forever_do_not_disturb_others(
    server: ServerProcess, ledger: Ledger
) -> None:
    stalled: list[Wire] = []
    try:
        for i in range(40):
            w = Wire(server.broker_port if i % 4 else server.namesrv_port)
            stalled.append(w)
            _, data = request(RequestCode.GET_MAX_OFFSET, {"topic": BASELINE_TOPIC, "queueId": "0"})
            cut = [2, 6, 20, len(data) - 1][i % 4]
            w.send(data[:cut])
        # one announces a (legal) 16 MiB frame and delivers 1 MiB of it, then stalls
        big = Wire(server.broker_port)
        stalled.append(big)
        big.send(struct.pack(">iI", MAX_FRAME, 2) + b"{}" + b"\0" * (1024 * 1024))
        others_are_served(server, ledger)
        for w in stalled[:3]:
            w.expect_silence(0.1)  # nobody got an answer to half a request
    finally:
        for w in stalled:
            w.close()
    others_are_served(server, ledger)


# --- 11: a client that never reads what it asked for ---------------------------------------------------


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


@pytest.fixture(scope="module")
def big_topic(server: ServerProcess, ledger: Ledger) -> str:
    """32 x 100 KiB messages: every pull of it answers with as much as the server will send at once."""
    topic = "BadInputBig"

    async def seed() -> None:
        c = await RawClient.open(server.broker)
        for i in range(32):
            body = b"\x5a" * (100 * 1024 - 4) + struct.pack(">i", i)
            sent = await c.send(topic, body, queue_id=0)
            assert sent.code == ResponseCode.SUCCESS, sent
            ledger.add(topic, 0, body)
        c.close()

    run(seed())
    return topic


@pytest.mark.parametrize("kind", ["pull", "send+pull"])
def test_client_that_never_reads_does_not_starve_others(
    server: ServerProcess, ledger: Ledger, big_topic: str, kind: str
) -> None:
    max_requests = 3000  # pulls: ~600 MB of answers if the server buffered them all for the attacker
    attack_seconds = 4.0
    probe_budget = 1.0
    assert server.proc is not None
    pid = server.proc.pid

    def attack_request() -> bytes:
        if kind == "pull":
            return request(RequestCode.PULL_MESSAGE, pull_ext(big_topic, 0, 0))[1]
        # a send (small answer) followed by a pull (large answer): writes and reads interleaved
        return (
            request(RequestCode.SEND_MESSAGE_V2, send_v2_ext("BadInputFlood"), b"f" * 1024)[1]
            + request(RequestCode.PULL_MESSAGE, pull_ext(big_topic, 0, 0))[1]
        )

    async def scenario() -> dict[str, Any]:
        c = await RawClient.open(server.broker)
        rss_before = _rss_kib(pid)
        attacker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        attacker.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        attacker.connect(("127.0.0.1", server.broker_port))
        attacker.setblocking(False)
        pending = bytearray()
        queued = 0
        latencies: list[float] = []
        started = time.monotonic()
        blocked_since: float | None = None
        try:
            while time.monotonic() - started < attack_seconds:
                while len(pending) < 64 * 1024 and queued < max_requests:
                    pending += attack_request()
                    queued += 1
                if pending:
                    try:
                        n = attacker.send(pending)
                    except BlockingIOError:
                        n = 0
                    del pending[:n]
                    if n:
                        blocked_since = None
                    elif blocked_since is None:
                        blocked_since = time.monotonic()
                    elif time.monotonic() - blocked_since > 1.0:
                        break  # the server stopped reading the attacker: the backpressure we want
                t0 = time.monotonic()
                probe = await c.call(
                    RequestCode.GET_MAX_OFFSET, {"topic": BASELINE_TOPIC, "queueId": "0"}, timeout=10
                )
                latencies.append(time.monotonic() - t0)
                assert probe.code == ResponseCode.SUCCESS
                await asyncio.sleep(0.02)
            t0 = time.monotonic()
            resp, msgs = await c.pull(big_topic, 0, 0, timeout=10)
            pull_latency = time.monotonic() - t0
            assert resp.code == ResponseCode.SUCCESS and msgs, resp
            rss_during = _rss_kib(pid)
        finally:
            attacker.close()
            c.close()
        return {
            "probes": len(latencies),
            "max_probe_s": round(max(latencies, default=0.0), 3),
            "slow_probes": [round(x, 3) for x in latencies if x > probe_budget],
            "pull_s": round(pull_latency, 3),
            "rss_growth_mib": round((rss_during - rss_before) / 1024),
            "queued": queued,
            "unsent_bytes": len(pending),
        }

    result = run(scenario())
    assert result["probes"] >= 10, result
    assert not result["slow_probes"], f"another client was served late while one never read: {result}"
    assert result["pull_s"] < probe_budget, result
    # One stalled reader must not make the server buffer unboundedly many answers for it.
    assert result["rss_growth_mib"] < 256, f"server buffered too much for one non-reading client: {result}"
    others_are_served(server, ledger)


# --- sysFlag bits that describe the broker's own view of the connection ----------------------------


@pytest.mark.parametrize("sys_flag", [0x10, 0x20, 0x30], ids=["bornhost-v6", "storehost-v6", "both"])
def test_client_host_bits_in_sys_flag_cannot_poison_the_log(
    fresh_server: ServerProcess, sys_flag: int
) -> None:
    """BORNHOST_V6/STOREHOST_V6 (0x10/0x20) say how long the stored host fields are; only the broker knows.

    A client that sets them over IPv4 must get either a refusal or a correctly stored record; it must not
    leave a record whose host lengths lie, which no consumer can decode and which crash recovery takes for
    a torn write, cutting off every message acknowledged after it, in every topic.
    """
    srv = fresh_server
    acked: dict[str, list[bytes]] = {"Honest": [], "Poison": []}

    async def produce() -> None:
        c = await RawClient.open(srv.broker)
        for i in range(4):
            if i == 1:
                ext = {**send_v2_ext("Poison"), "f": str(sys_flag)}
                resp = await c.call(RequestCode.SEND_MESSAGE_V2, ext, b"poison")
                if resp.code == ResponseCode.SUCCESS:
                    acked["Poison"].append(b"poison")
            sent = await c.send("Honest", f"h{i}".encode(), queue_id=0)
            assert sent.code == ResponseCode.SUCCESS, sent
            acked["Honest"].append(f"h{i}".encode())
        sent = await c.send("Poison", b"after", queue_id=0)
        assert sent.code == ResponseCode.SUCCESS, sent
        acked["Poison"].append(b"after")
        c.close()

    async def read_back(when: str) -> list[str]:
        problems = []
        c = await RawClient.open(srv.broker)
        try:
            for topic, bodies in acked.items():
                try:
                    got = await _drain(c, topic, 0)
                except MessageDecodeError as exc:
                    problems.append(f"{when}: {topic}/0 holds an undecodable record: {exc}")
                    continue
                if got != bodies:
                    problems.append(f"{when}: {topic}/0 acknowledged {bodies}, pulled {got}")
        finally:
            c.close()
        return problems

    run(produce())
    problems = run(read_back("live"))
    assert srv.proc is not None
    os.kill(srv.proc.pid, signal.SIGKILL)  # an unclean stop: recovery has to scan the log
    srv.proc.wait(10)
    srv.proc = None
    srv.start()
    problems += run(read_back("after crash recovery"))
    assert not problems, "\n".join(problems)


# --- 12: invalid topic and group names ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "reason"),
    [
        ("bad topic", "illegal characters"),
        ("t" * 128, "127"),
        ("", "blank"),
        ("tab\tname", "illegal characters"),
    ],
    ids=["space", "too-long", "empty", "tab"],
)
def test_send_to_invalid_topic_name(server: ServerProcess, ledger: Ledger, topic: str, reason: str) -> None:
    with Wire(server.broker_port) as w:
        opaque, data = request(RequestCode.SEND_MESSAGE_V2, send_v2_ext(topic), b"x")
        resp = w.call(data, opaque)
        assert resp.code == ResponseCode.SYSTEM_ERROR, resp.header
        assert reason in resp.remark and "topic" in resp.remark, resp.remark
    others_are_served(server, ledger)


def test_longest_legal_topic_name_is_accepted(server: ServerProcess, ledger: Ledger) -> None:
    with Wire(server.broker_port) as w:
        opaque, data = request(RequestCode.SEND_MESSAGE_V2, send_v2_ext("t" * 127), b"x")
        resp = w.call(data, opaque)
        assert resp.code == ResponseCode.SUCCESS, resp.header
    ledger.add("t" * 127, 0, b"x")
    others_are_served(server, ledger)


@pytest.mark.parametrize(
    ("group", "reason"),
    [
        ("bad group", "illegal characters"),
        ("g" * 128, "127"),
        ("", "blank"),
        ("g/../x", "illegal characters"),
    ],
    ids=["space", "too-long", "empty", "slash"],
)
def test_heartbeat_with_invalid_group_name(
    server: ServerProcess, ledger: Ledger, group: str, reason: str
) -> None:
    body = {
        "clientID": "127.0.0.1@bad-input",
        "producerDataSet": [],
        "consumerDataSet": [
            {
                "groupName": group,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                "unitMode": False,
                "subscriptionDataSet": [],
            }
        ],
    }
    with Wire(server.broker_port) as w:
        opaque, data = request(RequestCode.HEART_BEAT, None, json.dumps(body).encode())
        resp = w.call(data, opaque)
        assert resp.code == ResponseCode.SYSTEM_ERROR, resp.header
        assert reason in resp.remark and "group" in resp.remark, resp.remark
    others_are_served(server, ledger)


@pytest.mark.parametrize(
    "body",
    [b"", b"not json", b"[1,2]", b'{"clientID": 5, "consumerDataSet": "x"}'],
    ids=["empty", "text", "list", "types"],
)
def test_heartbeat_with_malformed_body(server: ServerProcess, ledger: Ledger, body: bytes) -> None:
    with Wire(server.broker_port) as w:
        opaque, data = request(RequestCode.HEART_BEAT, None, body)
        resp = w.call(data, opaque)
        assert resp.code == ResponseCode.SYSTEM_ERROR, resp.header
        assert resp.remark, "an error answer must say what was wrong"
    others_are_served(server, ledger)


def test_nothing_acknowledged_was_lost(server: ServerProcess, ledger: Ledger) -> None:
    assert sum(len(v) for v in ledger.acked.values()) >= 6
    others_are_served(server, ledger)
