"""Issue 23 finding 7: every registered request code, fed bodies of the wrong shape, answers a protocol
error naming the problem (never a traceback or an exception's text) and the connection keeps serving.

Driven in process through the same path a socket takes (``RemotingConnection._dispatch``), on a
connection that records what it would write.
"""

from __future__ import annotations

import asyncio
import logging
import random
from pathlib import Path

import pytest

from tests.broker.processor_support import broker_on
from tidemq.namesrv.server import NameServer
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.transport import RemotingConnection, RequestDispatcher

BODIES = [b"[]", b"null", b"1", b"{}", b'"x"', b"\xff\xfe\x80{", b'{"a": [1, {"b": null}]}']


def _random_header(rng: random.Random) -> dict[str, str]:
    keys = ["topic", "consumerGroup", "queueId", "group", "brokerName", "clientID", "offset", "x"]
    junk = ["", "-1", "x" * 300, "\u00e9", "9" * 40, "null", "{}", "0"]
    return {rng.choice(keys): rng.choice(junk) for _ in range(rng.randint(0, 5))}


class RecordingConnection(RemotingConnection):
    """A connection with no socket that keeps what it would send."""

    def __init__(self, handler: RequestDispatcher) -> None:
        super().__init__(handler)
        self.sent: list[RemotingCommand] = []
        self.peer = ("127.0.0.1", 40000)

    @property
    def is_closed(self) -> bool:
        return False

    def send(self, cmd: RemotingCommand) -> None:
        self.sent.append(cmd)


async def _answer(conn: RecordingConnection, req: RemotingCommand) -> RemotingCommand | None:
    before = len(conn.sent)
    conn._dispatch(req)
    for _ in range(200):
        if len(conn.sent) > before:
            return conn.sent[-1]
        await asyncio.sleep(0.005)
    return None  # held (a long-polling pull) or oneway


def _check(
    code: int, body: bytes, response: RemotingCommand | None, caplog: pytest.LogCaptureFixture
) -> list[str]:
    problems = []
    for record in caplog.records:
        if record.exc_info is not None or "Traceback" in record.getMessage():
            problems.append(f"code {code} body {body!r}: traceback logged: {record.getMessage()}")
    if response is not None and response.code == ResponseCode.SYSTEM_ERROR:
        remark = response.remark or ""
        for leaked in ("Error:", "Exception", "object has no attribute", "not subscriptable", "KeyError"):
            if leaked in remark:
                problems.append(f"code {code} body {body!r}: exception text in remark {remark!r}")
    caplog.clear()
    return problems


async def _sweep(
    dispatcher: RequestDispatcher, caplog: pytest.LogCaptureFixture, conn: RecordingConnection
) -> list[str]:
    rng = random.Random(23)
    problems: list[str] = []
    caplog.set_level(logging.INFO)
    for code in dispatcher.codes():
        for body in BODIES:
            for ext in (None, _random_header(rng)):
                req = RemotingCommand(code, ext_fields=ext, body=body)
                response = await _answer(conn, req)
                problems += _check(code, body, response, caplog)
    # The connection still serves a well-formed request after all of that.
    alive = await _answer(conn, RemotingCommand(RequestCode.GET_BROKER_CLUSTER_INFO))
    if alive is None:
        problems.append("no answer to a good request after the sweep")
    return problems


async def test_every_broker_code_answers_bad_bodies_without_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with broker_on(tmp_path) as broker:
        broker.dispatcher.register(RequestCode.GET_BROKER_CLUSTER_INFO, lambda c, r: r.response())
        conn = RecordingConnection(broker.dispatcher)
        problems = await _sweep(broker.dispatcher, caplog, conn)
        broker.holds.connection_closed(conn)
    assert not problems, "\n".join(problems[:40]) + f"\n({len(problems)} in all)"


async def test_every_name_server_code_answers_bad_bodies_without_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    namesrv = NameServer(port=0)
    dispatcher = namesrv.server._handler
    assert isinstance(dispatcher, RequestDispatcher)
    problems = await _sweep(dispatcher, caplog, RecordingConnection(dispatcher))
    assert not problems, "\n".join(problems[:40]) + f"\n({len(problems)} in all)"


async def test_a_stream_of_bad_bodies_costs_the_log_a_few_lines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Finding 7's log half: 2,000 HEART_BEATs with a body of the wrong shape are each refused, but logged
    a few lines a second (with a count of the rest), not 2,000 lines (about 6,000 lines for the abuse
    case before)."""
    caplog.set_level(logging.INFO)
    async with broker_on(tmp_path) as broker:
        conn = RecordingConnection(broker.dispatcher)
        started = asyncio.get_running_loop().time()
        for _ in range(2_000):
            answer = await _answer(conn, RemotingCommand(RequestCode.HEART_BEAT, body=b"[]"))
            assert answer is not None and answer.code == ResponseCode.SYSTEM_ERROR
        seconds = asyncio.get_running_loop().time() - started
        broker.holds.connection_closed(conn)
    lines = [r for r in caplog.records if "refused request" in r.getMessage()]
    assert len(lines) <= 5 * (seconds + 2), f"{len(lines)} log lines for 2,000 bad bodies in {seconds:.1f} s"
