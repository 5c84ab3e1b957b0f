"""The real NSQ programs for the ``real_nsq`` tests: nsqd and nsqlookupd v1.3.0 and a go-nsq v1.1.0 program.

``make nsq-go`` (a prerequisite of ``make pytest``) builds all three from the Go module proxy into
``.cache/nsq/bin``, pinned by ``interop/nsq-go/go.sum``; :func:`nsq_binaries` runs it when they are
missing, and fails with the one-line reason when it cannot (no silent skip). The servers run on free
loopback ports with their data under a temp dir, and are stopped by PID like ``ServerProcess``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support import ServerProcess, free_port

ROOT = Path(__file__).resolve().parent.parent
NSQ_BIN = ROOT / ".cache" / "nsq" / "bin"
NSQD = NSQ_BIN / "nsqd"
NSQLOOKUPD = NSQ_BIN / "nsqlookupd"
NSQGO = NSQ_BIN / "nsqgo"


def nsq_binaries() -> None:
    """Make sure the three programs exist (building them with ``make nsq-go`` once if not)."""
    if all(p.is_file() for p in (NSQD, NSQLOOKUPD, NSQGO)):
        return
    proc = subprocess.run(
        ["make", "-s", "nsq-go"], cwd=ROOT, capture_output=True, text=True, timeout=900, check=False
    )
    if proc.returncode != 0:
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        pytest.fail(f"make nsq-go failed: {lines[0] if lines else proc.returncode}", pytrace=False)


def http_get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    """Status and body of a GET (error statuses included, they are answers too)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), bytes(resp.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), bytes(exc.read())


def http_post(url: str, body: bytes = b"", timeout: float = 10.0) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return int(resp.status), bytes(resp.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), bytes(exc.read())


class _GoServer(ServerProcess):
    """A Go NSQ daemon: ready once its HTTP ``/ping`` answers OK; SIGTERM by PID to stop."""

    binary: Path

    def __init__(self, data_dir: Path, *extra: str) -> None:
        super().__init__(data_dir, *extra, command=self.binary.name)

    def http_base(self) -> str:
        raise NotImplementedError

    def start(self, timeout: float = 20.0) -> ServerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(self.args(), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                if http_get(self.http_base() + "/ping", timeout=1.0) == (200, b"OK"):
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(
            f"{self.binary.name} did not start: {self.log_path.read_text(errors='replace')[-3000:]}"
        )

    def stop(self, timeout: float = 20.0) -> int:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        return super().stop(timeout)


class RealNsqd(_GoServer):
    """nsqd v1.3.0; ``.nsqd`` and ``.nsqd_http`` as for ``ServerProcess``."""

    binary = NSQD

    def args(self) -> list[str]:
        return [
            str(NSQD),
            f"--tcp-address={self.nsqd}",
            f"--http-address={self.nsqd_http}",
            "--https-address=",
            "--broadcast-address=127.0.0.1",
            f"--data-path={self.data_dir}",
            *self.extra,
        ]

    def http_base(self) -> str:
        return f"http://{self.nsqd_http}"


class RealLookupd(_GoServer):
    """nsqlookupd v1.3.0; ``.tcp`` for nsqd's ``--lookupd-tcp-address``, ``.http`` for consumers."""

    binary = NSQLOOKUPD

    def __init__(self, data_dir: Path, *extra: str) -> None:
        super().__init__(data_dir, *extra)
        self.tcp_port = free_port()
        self.http_port = free_port()

    @property
    def tcp(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"

    @property
    def http(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    def args(self) -> list[str]:
        return [
            str(NSQLOOKUPD),
            f"--tcp-address={self.tcp}",
            f"--http-address={self.http}",
            "--broadcast-address=127.0.0.1",
            *self.extra,
        ]

    def http_base(self) -> str:
        return f"http://{self.http}"
