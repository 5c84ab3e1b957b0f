"""The long-running client commands as real processes: stopped by SIGTERM/SIGINT, fed by a live pipe, and
losing their server mid-run. What they printed is what they settled, and they say so in one summary."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from typing import IO

import pytest

from tests.support import ServerProcess, tidemq_cli, unique, wait_for

pytestmark = pytest.mark.e2e


class Running:
    """A ``tidemq`` client command as a child process; a thread collects its stdout lines as they come."""

    def __init__(self, *args: str, stdin: bool = False) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tidemq", *args],
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: list[str] = []
        assert self.proc.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[bytes]) -> None:
        for line in stream:
            self.lines.append(line.decode())

    def write(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode())
        self.proc.stdin.flush()

    def signal(self, sig: signal.Signals) -> None:
        os.kill(self.proc.pid, sig)

    def finish(self, timeout: float = 60) -> tuple[int, list[str], str]:
        """Wait for the exit; the return code, every stdout line and stderr."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(
                f"still running after {timeout}s; stdout so far: {self.lines[-5:]}"
            ) from None
        self._reader.join(10)
        assert self.proc.stderr is not None
        err = self.proc.stderr.read().decode()
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        return self.proc.returncode, self.lines, err


tidemq = tidemq_cli


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_consume_commits_what_it_printed_when_stopped_by_a_signal(
    server: ServerProcess, sig: signal.Signals
) -> None:
    topic, group = unique("CliSig"), unique("CliSigGroup")
    ns = ["--namesrv", server.namesrv]
    assert tidemq("produce", "-t", topic, "-n", "2000", "--size", "8", *ns).returncode == 0
    consumer = Running("consume", "-t", topic, "-g", group, "--from", "first", "--format", "json", *ns)
    wait_for(lambda: len(consumer.lines) >= 100, timeout=30)
    consumer.signal(sig)  # while it is still printing: stdout is a pipe the test has not drained yet
    rc, lines, err = consumer.finish()
    assert rc == 0, err
    assert "Aborted" not in err and "Traceback" not in err
    printed = [json.loads(line) for line in lines]
    assert f"consumed {len(printed)} messages (stopped by {sig.name})" in err
    progress = tidemq("group", "progress", group, "--topic", topic, "--format", "json", *ns)
    rows = [json.loads(line) for line in progress.stdout.splitlines()]
    committed = sum(r["consumer_offset"] for r in rows)
    assert committed == len(printed), "what was printed, and only that, is committed"
    assert len({(p["queue"], p["offset"]) for p in printed}) == len(printed)


def test_produce_reads_a_live_pipe_and_stops_on_sigterm(server: ServerProcess) -> None:
    topic = unique("CliPipe")
    producer = Running("produce", "-t", topic, "--format", "json", "--namesrv", server.namesrv, stdin=True)
    producer.write("first line\n")
    # The pipe stays open and idle: the line is sent now, not when 32 have come or stdin ends.
    wait_for(lambda: len(producer.lines) >= 1, timeout=30)
    assert json.loads(producer.lines[0])["status"] == "SEND_OK"
    producer.signal(signal.SIGTERM)
    rc, lines, err = producer.finish()
    assert rc == 0, err
    assert "sent 1 messages" in err and "(stopped by SIGTERM)" in err
    assert len(lines) == 1


def test_produce_reports_once_when_the_server_dies_mid_run(fresh_server: ServerProcess) -> None:
    producer = Running(
        "produce", "-t", "CliDies", "-n", "500000", "--size", "16", "--format", "json",
        "--namesrv", fresh_server.namesrv,
    )  # fmt: skip
    wait_for(lambda: len(producer.lines) >= 200, timeout=30)
    fresh_server.kill()
    rc, lines, err = producer.finish()
    records = [json.loads(line) for line in lines]
    acked = [r for r in records if r["status"] == "SEND_OK"]
    failed = [r for r in records if r["status"] == "FAILED"]
    assert rc == 1, err
    assert failed and len(acked) + len(failed) == len(records)
    assert "Traceback" not in err and "never retrieved" not in err and "WARNING" not in err, err[-3000:]
    assert len([line for line in err.splitlines() if line.startswith("Error: ")]) == 1, err[-3000:]
    summary = err.splitlines()[-1]
    assert summary.startswith(f"sent {len(acked)} messages to CliDies"), summary
    assert f"{len(failed)} failed" in summary
    assert sorted(r["i"] for r in records) == list(range(len(records))), "every message started is reported"


def test_produce_with_an_unreachable_name_server_says_it_once() -> None:
    done = tidemq("produce", "-t", "T", "-n", "100", "--namesrv", "127.0.0.1:1")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "never retrieved" not in done.stderr, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "name server unreachable" in errors[0]
    assert done.stderr.splitlines()[-1].startswith("sent 0 messages to T")


def test_nsq_publish_sends_a_live_pipe_and_both_nsq_tools_stop_on_sigterm(server: ServerProcess) -> None:
    topic = unique("cli_live")
    publisher = Running("nsq", "publish", "--topic", topic, "--nsqd-tcp-address", server.nsqd, stdin=True)
    publisher.write("one\n")

    def depth() -> int:
        url = f"http://{server.nsqd_http}/stats?format=json&topic={topic}"
        with urllib.request.urlopen(url, timeout=5) as resp:
            stats = json.loads(resp.read())
        return sum(t["message_count"] for t in stats.get("topics") or [] if t["topic_name"] == topic)

    wait_for(lambda: depth() == 1, timeout=30)  # published while stdin stays open and idle
    publisher.signal(signal.SIGTERM)
    rc, _, err = publisher.finish()
    assert rc == 0 and "published 1 messages" in err and "(stopped by SIGTERM)" in err, err

    tail = Running("nsq", "tail", "--topic", topic, "--channel", "c", "--nsqd-tcp-address", server.nsqd)
    wait_for(lambda: len(tail.lines) >= 1, timeout=30)
    tail.signal(signal.SIGINT)
    rc, lines, err = tail.finish()
    assert rc == 0 and lines == ["one\n"], err
