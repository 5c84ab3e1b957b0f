"""``tidemq nsq publish`` and ``tidemq nsq tail`` against a real ``tidemq server`` (nsqd + lookupd)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import ServerProcess

pytestmark = pytest.mark.e2e


def tidemq(*args: str, stdin: str = "", timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidemq", "--log-level", "WARNING", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_publish_stdin_then_tail_through_nsqd_and_through_lookupd(server: ServerProcess) -> None:
    lines = [f"line {i}" for i in range(300)]
    published = tidemq(
        "nsq",
        "publish",
        "--topic",
        "cli_nsq",
        "--nsqd-tcp-address",
        server.nsqd,
        stdin="\n".join(lines) + "\n\n",
    )
    assert published.returncode == 0, published.stderr
    assert "published 300 messages" in published.stderr

    first = tidemq(
        "nsq", "tail", "--topic", "cli_nsq", "--channel", "keep", "--nsqd-tcp-address", server.nsqd, "-n", "5"
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == lines[:5]
    rest = tidemq(
        "nsq",
        "tail",
        "--topic",
        "cli_nsq",
        "--channel",
        "keep",
        "--lookupd-http-address",
        server.lookupd_http,
        "-n",
        "295",
        "--print-topic",
    )
    assert rest.returncode == 0, rest.stderr
    assert rest.stdout.splitlines() == [f"cli_nsq | {line}" for line in lines[5:]], "the same channel goes on"


def test_publish_with_a_delimiter_and_bad_usage(server: ServerProcess) -> None:
    done = tidemq(
        "nsq",
        "publish",
        "--topic",
        "cli_delim",
        "--delimiter",
        ",",
        "--nsqd-tcp-address",
        server.nsqd,
        stdin="a,b,,c",
    )
    assert done.returncode == 0 and "published 3 messages" in done.stderr
    tail = tidemq("nsq", "tail", "--topic", "cli_delim", "--nsqd-tcp-address", server.nsqd, "-n", "3")
    assert tail.stdout.splitlines() == ["a", "b", "c"]
    assert tidemq("nsq", "tail", "--topic", "t").returncode == 2  # neither address
    bad_topic = tidemq("nsq", "publish", "--topic", "no spaces", "--nsqd-tcp-address", server.nsqd)
    assert bad_topic.returncode == 2 and "not a valid topic name" in bad_topic.stderr
    bad_opt = tidemq(
        "nsq", "tail", "--topic", "t", "--nsqd-tcp-address", server.nsqd, "--consumer-opt", "nope"
    )
    assert bad_opt.returncode == 2 and "NAME=VALUE" in bad_opt.stderr
    unreachable = tidemq("nsq", "publish", "--topic", "t", "--nsqd-tcp-address", "127.0.0.1:1", stdin="x\n")
    assert unreachable.returncode == 1 and "Traceback" not in unreachable.stderr
