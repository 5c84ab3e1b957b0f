"""Interop: the real go-nsq v1.1.0 against tidemq's nsqd and lookupd.

``test_interop_nsq.py`` runs go-nsq beside pynsq and nsqjs through the same assertions (PUB and MPUB read
back exactly once; everything consumed exactly once and nothing left in the channel; plain, snappy and
deflate; found directly and through tidemq's nsqlookupd). This module adds what go-nsq exercises beyond
them: DPUB (the messages wait on the channel, then arrive), REQ with backoff (go-nsq sends RDY 0
everywhere, tests with RDY 1, then resumes; tidemq must deliver nothing while RDY is 0) and TOUCH (a
message held past its timeout but touched is not redelivered; the same hold without TOUCH is).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.interop.test_interop_nsq import (
    bodies_file,
    raw_drain,
    raw_publish,
)
from tests.nsq.nsqd.test_nsqd_errors import channels_of
from tests.real_nsq_support import NSQGO, nsq_binaries
from tests.support import ScriptRun, ServerProcess, run_script, server_log, unique

pytestmark = [pytest.mark.e2e, pytest.mark.real_nsq]

MSG_TIMEOUT_MS = 3000
CLIENT_TIMEOUT = 40


@pytest.fixture(scope="module")
def nsqd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    nsq_binaries()
    data = tmp_path_factory.mktemp("nsqd-go") / "data"
    proc = ServerProcess(data, "--msg-timeout", str(MSG_TIMEOUT_MS)).start()  # nsqd + nsqlookupd
    yield proc
    proc.stop()


def go_nsq(action: str, **options: object) -> ScriptRun:
    return run_script([str(NSQGO), action], CLIENT_TIMEOUT, **options)


def messages(result: ScriptRun) -> list[dict[str, object]]:
    return [r for r in result.records if "body" in r]


def test_go_nsq_dpub_waits_on_the_channel_then_arrives(nsqd: ServerProcess, tmp_path: Path) -> None:
    topic = unique("godpub")
    bodies = [f"{topic}-{i}" for i in range(5)]
    raw_publish(nsqd.nsqd, topic, [b"first"])  # the topic exists...
    raw_drain(nsqd.nsqd, topic, "c", 1, quiet=0.1)  # ...and so does channel c, now empty

    result = go_nsq(
        "publish",
        nsqd_tcp_address=nsqd.nsqd,
        topic=topic,
        mode="dpub",
        delay_ms=8000,
        bodies_file=bodies_file(tmp_path, bodies),
    )
    assert result.rc == 0, result.describe() + server_log(nsqd)
    assert [(r["command"], r["response"]) for r in result.records] == [("DPUB", "OK")] * 5
    channel = (channels_of(nsqd, topic) or {})["c"]
    assert channel["deferred_count"] == 5 and channel["depth"] == 0, channel

    got = raw_drain(nsqd.nsqd, topic, "c", 5, quiet=0.5)
    assert sorted(m.body for m in got) == sorted(b.encode() for b in bodies)
    assert all(m.attempts == 1 for m in got)


def test_go_nsq_req_with_backoff(nsqd: ServerProcess) -> None:
    """Three handler failures: each REQ comes back with attempts + 1, and nothing arrives while RDY is 0."""
    topic = unique("goreq")
    bodies = [f"{topic}-{i}" for i in range(12)]
    raw_publish(nsqd.nsqd, topic, [b.encode() for b in bodies])

    result = go_nsq(
        "consume",
        nsqd_tcp_address=nsqd.nsqd,
        topic=topic,
        channel="c",
        count=len(bodies),
        max_in_flight=1,
        fail_first=3,
    )
    assert result.rc == 0, result.describe() + server_log(nsqd)
    got = messages(result)
    failed = [r for r in got if r["action"] == "req"]
    finished = [r for r in got if r["action"] == "fin"]
    assert len(failed) == 3
    assert sorted(r["body"] for r in finished) == sorted(bodies)  # type: ignore[type-var]
    tries = Counter(str(r["body"]) for r in failed)
    for r in finished:  # a requeued message comes back with one more attempt per failure
        assert r["attempts"] == tries[str(r["body"])] + 1, r
    events = [r["event"] for r in result.records if "event" in r]
    assert "backoff" in events and "testing" in events and events[-1] == "resume", events
    assert [r for r in got if r["phase"] == "backoff"] == [], "tidemq delivered while RDY was 0"
    raw_drain(nsqd.nsqd, topic, "c", 0, quiet=MSG_TIMEOUT_MS / 1000 + 1.5)


@pytest.mark.parametrize("touch", [True, False], ids=["touch", "no_touch"])
def test_go_nsq_touch_keeps_a_held_message(nsqd: ServerProcess, touch: bool) -> None:
    """Held 2.5 s with a 1 s msg_timeout: touched every 100 ms it stays; untouched it comes back."""
    topic = unique("gotouch")
    raw_publish(nsqd.nsqd, topic, [b"held"])
    result = run_script(
        [str(NSQGO), "consume", *(["--touch"] if touch else [])],
        CLIENT_TIMEOUT,
        nsqd_tcp_address=nsqd.nsqd,
        topic=topic,
        channel="c",
        count=1 if touch else 2,
        max_in_flight=2,
        msg_timeout_ms=1000,
        hold_ms=2500,
    )
    assert result.rc == 0, result.describe() + server_log(nsqd)
    got = messages(result)
    if touch:
        assert [(r["body"], r["attempts"], r["action"]) for r in got] == [("held", 1, "fin")]
        assert int(str(got[0]["touches"])) >= 20
        raw_drain(nsqd.nsqd, topic, "c", 0, quiet=MSG_TIMEOUT_MS / 1000 + 1.5)
    else:  # the control: the same hold without TOUCH times out and is delivered again
        attempts = [r["attempts"] for r in got]  # (a third delivery may be handled while stopping)
        assert {r["body"] for r in got} == {"held"} and attempts[:2] == [1, 2], got


def test_bad_arguments_are_a_clear_error(nsqd: ServerProcess) -> None:
    """Bad arguments are a clear error (exit 1), not a hang; stdout stays JSON."""
    result = go_nsq("consume", topic="t", channel="c", count=1)
    assert result.rc == 1 and "needs one of --nsqd-tcp-address" in result.stderr
    assert json.dumps(result.records) == "[]"
