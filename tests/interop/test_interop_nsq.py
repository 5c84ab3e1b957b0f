"""Interop: real third-party NSQ clients (pynsq from PyPI, nsqjs from npm) against tidemq's nsqd.

Each client runs as its own process (tests/interop/pynsq_client.py, interop/nsqjs/{publish,consume}.js;
same command line and output contract, see the docstring of pynsq_client.py) and the other side of every
exchange is checked with the raw V2 client of tests/nsq_support.py:

* the client publishes (PUB, then MPUB) and a raw subscriber reads back exactly those bodies, once each;
* a raw publisher publishes and the client consumes exactly those bodies, once each, and afterwards the
  channel holds nothing: a second raw subscriber gets no message within the in-flight timeout, so an
  unfinished message would have come back to it.

Every case runs plain, with snappy and with deflate; the client scripts fail when the compression they
asked for is not granted, so the compressed paths are really exercised. Consumers find nsqd through
``SOURCES``: adding an nsqlookupd there (``lookupd_http_address``) is all a lookupd variant needs.
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.nsq_support import RawNsq
from tests.real_nsq_support import NSQGO, nsq_binaries
from tests.support import ScriptRun, ServerProcess, run, run_script, server_log, unique
from tidemq.nsq.protocol import Message

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
PYNSQ_SCRIPT = ROOT / "tests" / "interop" / "pynsq_client.py"
NSQJS_DIR = ROOT / "interop" / "nsqjs"
CLIENTS = ["pynsq", "nsqjs", "go-nsq"]
COMPRESSIONS = ["none", "snappy", "deflate"]
MSG_TIMEOUT_MS = 3000
CLIENT_TIMEOUT = 40
MPUB_BATCH = 7

#: How a consumer finds nsqd: option name and value of the client scripts, per discovery method.
SOURCES: dict[str, Callable[[ServerProcess], dict[str, str]]] = {
    "nsqd": lambda server: {"nsqd_tcp_address": server.nsqd},
    "lookupd": lambda server: {"lookupd_http_address": server.lookupd_http},
}
#: Discovery through lookupd is the same for every compression, so it runs once, uncompressed.
CONSUME_CASES = [("nsqd", c) for c in COMPRESSIONS] + [("lookupd", "none")]


@pytest.fixture(scope="module")
def nsqd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("nsqd") / "data"
    proc = ServerProcess(data, "--msg-timeout", str(MSG_TIMEOUT_MS)).start()  # nsqd + nsqlookupd
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def nsqjs_installed() -> None:
    """nsqjs from the lockfile; ``make test`` installs Node and runs ``npm ci`` before pytest."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("nsqjs interop: node/npm not on PATH (`make test` installs them with apt)")
    if not (NSQJS_DIR / "node_modules" / "nsqjs" / "package.json").is_file():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=NSQJS_DIR,
            check=True,
            timeout=300,
        )


@pytest.fixture(params=CLIENTS)
def client(request: pytest.FixtureRequest) -> str:
    if request.param == "nsqjs":
        request.getfixturevalue("nsqjs_installed")
    if request.param == "go-nsq":
        nsq_binaries()
    return str(request.param)


def run_client(client: str, action: str, **options: object) -> ScriptRun:
    """Run one client script to completion; ``nsqd_tcp_address=x`` becomes ``--nsqd-tcp-address x``."""
    if client == "pynsq":
        argv = [sys.executable, str(PYNSQ_SCRIPT), action]
    elif client == "go-nsq":
        argv = [str(NSQGO), action]
    else:
        argv = [str(shutil.which("node")), str(NSQJS_DIR / f"{action}.js")]
    return run_script(argv, CLIENT_TIMEOUT, **options)


def make_bodies(tag: str, count: int = 45) -> list[str]:
    """Distinct bodies: multi-byte and control characters, 1 byte to ~170 KB (more than one snappy chunk)."""
    rnd = random.Random(tag)
    alphabet = 'abcXYZ019 \t\n"\\\x00éß世界🙂'
    bodies = [
        f"{tag}-{i}-" + "".join(rnd.choices(alphabet, k=rnd.choice([0, 1, 30, 700, 2500])))
        for i in range(count)
    ]
    bodies[count // 2] = f"{tag}-big-" + "lorem ipsum é世🙂 " * 8000
    return bodies


def bodies_file(tmp_path: Path, bodies: list[str]) -> Path:
    path = tmp_path / f"bodies-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps(bodies), encoding="utf-8")
    return path


def raw_publish(addr: str, topic: str, bodies: list[bytes]) -> None:
    """First half one PUB each, the rest as MPUBs; every command must be answered OK."""

    async def go() -> None:
        pub = await RawNsq.open(addr)
        try:
            await pub.identify(client_id="raw-pub")
            half = len(bodies) // 2
            for body in bodies[:half]:
                assert await pub.pub(topic, body) == b"OK"
            for i in range(half, len(bodies), MPUB_BATCH):
                assert await pub.mpub(topic, bodies[i : i + MPUB_BATCH]) == b"OK"
        finally:
            pub.close()

    run(go())


def raw_drain(addr: str, topic: str, channel: str, count: int, quiet: float) -> list[Message]:
    """Receive ``count`` messages, FIN each, then require silence for ``quiet`` seconds."""

    async def go() -> list[Message]:
        sub = await RawNsq.open(addr)
        try:
            await sub.identify(client_id="raw-sub")
            await sub.sub(topic, channel, rdy=100)
            got = []
            for _ in range(count):
                msg = await sub.message(timeout=15)
                sub.send("FIN", msg.id)
                got.append(msg)
            with pytest.raises(TimeoutError):
                extra = await sub.frame(timeout=quiet)
                raise AssertionError(f"unexpected frame after {count} messages: {extra!r}")
            return got
        finally:
            sub.close()

    result: list[Message] = run(go())
    return result


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_client_publishes_pub_and_mpub(
    nsqd: ServerProcess, client: str, compression: str, tmp_path: Path
) -> None:
    topic = unique(f"pub_{client}_{compression}")
    bodies = make_bodies(topic)
    singles, batched = bodies[:22], bodies[22:]  # 23 batched: MPUBs of 7, 7, 7 and 2

    one = run_client(
        client,
        "publish",
        nsqd_tcp_address=nsqd.nsqd,
        topic=topic,
        mode="pub",
        bodies_file=bodies_file(tmp_path, singles),
        compression=compression,
    )
    assert one.rc == 0, one.describe() + server_log(nsqd)
    assert [(r["command"], r["messages"], r["response"]) for r in one.records] == [("PUB", 1, "OK")] * 22

    many = run_client(
        client,
        "publish",
        nsqd_tcp_address=nsqd.nsqd,
        topic=topic,
        mode="mpub",
        batch=MPUB_BATCH,
        bodies_file=bodies_file(tmp_path, batched),
        compression=compression,
    )
    assert many.rc == 0, many.describe() + server_log(nsqd)
    assert [(r["command"], r["messages"]) for r in many.records] == [("MPUB", 7)] * 3 + [("MPUB", 2)]

    got = raw_drain(nsqd.nsqd, topic, "check", len(bodies), quiet=1.0)
    assert sorted(m.body for m in got) == sorted(b.encode() for b in bodies)
    assert all(m.attempts == 1 for m in got)


@pytest.mark.parametrize(("source", "compression"), CONSUME_CASES)
def test_client_consumes_and_finishes_everything(
    nsqd: ServerProcess, client: str, compression: str, source: str
) -> None:
    topic = unique(f"sub_{client}_{compression}")
    bodies = make_bodies(topic)
    raw_publish(nsqd.nsqd, topic, [b.encode() for b in bodies])

    result = run_client(
        client,
        "consume",
        **SOURCES[source](nsqd),
        topic=topic,
        channel="c",
        count=len(bodies),
        max_in_flight=7,
        compression=compression,
    )
    assert result.rc == 0, result.describe() + server_log(nsqd)
    delivered = [r for r in result.records if "body" in r]
    received = [r["body"] for r in delivered]
    assert len(received) == len(bodies)
    assert sorted(received) == sorted(bodies)  # bodies are distinct: this also rules out duplicates
    assert all(r["attempts"] == 1 for r in delivered)
    assert len({r["id"] for r in delivered}) == len(bodies)

    # Anything the client left unfinished goes back to the channel when its in-flight timeout expires
    # (nsqd keeps a closed client's messages in flight until then); a new subscriber must see none of it.
    raw_drain(nsqd.nsqd, topic, "c", 0, quiet=MSG_TIMEOUT_MS / 1000 + 1.5)


def test_raw_drain_notices_leftovers(nsqd: ServerProcess) -> None:
    """The emptiness check above is real: an unfinished message does reach the second subscriber."""
    topic = unique("leftover")
    raw_publish(nsqd.nsqd, topic, [b"one", b"two"])

    async def take_one_and_leave() -> None:
        sub = await RawNsq.open(nsqd.nsqd)
        await sub.sub(topic, "c", rdy=1)
        msg = await sub.message()
        sub.send("FIN", msg.id)
        sub.send("RDY", "0")
        await asyncio.sleep(0.2)
        sub.close()

    run(take_one_and_leave())
    with pytest.raises(AssertionError, match="unexpected frame"):
        raw_drain(nsqd.nsqd, topic, "c", 0, quiet=MSG_TIMEOUT_MS / 1000 + 1.5)
