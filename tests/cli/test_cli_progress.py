"""Long-running commands show progress on a terminal and nothing in a pipe (issue 25, CLI polish): the
command's stderr is a pseudo-terminal here, its stdout a file, as in ``tidemq consume -n 500 > out``."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ServerProcess, tidemq_cli, unique

pytestmark = pytest.mark.e2e


def _run_with_tty_stderr(args: list[str], stdout: Path, timeout: float = 60.0) -> str:
    """Run ``tidemq args`` with stderr on a pty; what it wrote there."""
    leader, follower = pty.openpty()
    with stdout.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tidemq", *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=follower,
        )
    os.close(follower)
    seen = b""
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], timeout)
            if not ready:
                raise AssertionError(f"tidemq {' '.join(args)} wrote nothing for {timeout} s")
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            seen += chunk
    finally:
        proc.wait(timeout=timeout)
        os.close(leader)
    assert proc.returncode == 0, seen.decode(errors="replace")
    return seen.decode(errors="replace")


def test_consume_and_nsq_tail_show_progress_on_a_terminal_only(server: ServerProcess, tmp_path: Path) -> None:
    topic = unique("progress")
    ns = ["--namesrv", server.namesrv]
    assert tidemq_cli("produce", "-t", topic, "-n", "300", "--size", "8", *ns).returncode == 0

    stderr = _run_with_tty_stderr(
        ["consume", "-t", topic, "-g", unique("g"), "--from", "first", "-n", "300", *ns], tmp_path / "out"
    )
    assert "receiving" in stderr and "100%" in stderr, stderr
    assert len((tmp_path / "out").read_text().splitlines()) == 300
    piped = tidemq_cli("consume", "-t", topic, "-g", unique("g"), "--from", "first", "-n", "300", *ns)
    assert piped.returncode == 0 and "receiving" not in piped.stderr, "no bar where stderr is not a terminal"

    nsq_topic = unique("progress")
    published = tidemq_cli(
        "nsq", "publish", "--topic", nsq_topic, "--nsqd-tcp-address", server.nsqd, stdin="a\nb\nc\n"
    )
    assert published.returncode == 0, published.stderr
    stderr = _run_with_tty_stderr(
        [
            "nsq",
            "tail",
            "--topic",
            nsq_topic,
            "--channel",
            "c",
            "--nsqd-tcp-address",
            server.nsqd,
            "-n",
            "3",
        ],
        tmp_path / "tail",
    )
    assert "receiving" in stderr, stderr
    assert (tmp_path / "tail").read_text().splitlines() == ["a", "b", "c"]
