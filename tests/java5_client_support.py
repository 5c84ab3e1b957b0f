"""Apache RocketMQ's official 5.x Java SDK (rocketmq-client-java, the gRPC client) as a test peer:
``interop/rocketmq-java/client5`` is built by ``make rocketmq-java-client5`` into
``.cache/rocketmq-java-client5`` (``peer.jar`` and its ``lib/``); the official Python SDK's peer is
``tests/interop/python5_peer.py``. Each run is one JVM printing JSON lines (see ``tests.support.run_script``);
the SDK's logs (``user.home``/logs/rocketmq) stay in the test's temp dir."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import ScriptRun, run_script

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / ".cache" / "rocketmq-java-client5"
#: The SDK's pinned version (interop/rocketmq-java/client5/pom.xml).
CLIENT_VERSION = "5.2.0"
PYTHON_PEER = Path(__file__).resolve().parent / "interop" / "python5_peer.py"


def peer_argv(home: Path, log_level: str = "INFO") -> list[str]:
    jar = BUILD / "peer.jar"
    if not jar.exists() or not any((BUILD / "lib").glob("rocketmq-client-java-*.jar")):
        pytest.fail(f"the Java 5.x test peer is missing from {BUILD}: run `make rocketmq-java-client5`")
    home.mkdir(parents=True, exist_ok=True)
    return [
        "java",
        "-Xmx256m",
        "-XX:TieredStopAtLevel=1",  # short runs: start fast rather than optimise
        f"-Duser.home={home}",
        f"-Drocketmq.log.level={log_level}",
        "-cp",
        f"{jar}:{BUILD / 'lib'}/*",
        "tidemq.interop5.Peer",
    ]


class Sdk5Peer:
    """Runs a 5.x SDK peer's sub-commands (produce, simple-consume, push-consume for Java; produce,
    simple-consume, probe for Python) against one gRPC endpoint; both print the same records
    (``sent``, ``received``, ``acked``, ``not-acked``, ``consumed``, ``*-error``, ``done``)."""

    def __init__(self, language: str, endpoint: str, home: Path) -> None:
        if language not in ("java", "python"):
            raise ValueError(f"no 5.x peer for {language!r}")
        self.language = language
        self.endpoint = endpoint
        self.home = home

    def argv(self) -> list[str]:
        if self.language == "java":
            return peer_argv(self.home)
        self.home.mkdir(parents=True, exist_ok=True)
        return [sys.executable, str(PYTHON_PEER)]

    def run(
        self, command: str, *args: str, timeout: int = 60, check: bool = True, **options: object
    ) -> ScriptRun:
        argv = [*self.argv(), command, "--endpoint", self.endpoint, *args]
        if self.language == "python":
            argv += ["--home", str(self.home)]
        result = run_script(argv, timeout, **options)
        if check:
            assert result.rc == 0, result.describe()
        return result


def events(result: ScriptRun, event: str) -> list[dict[str, Any]]:
    return [r for r in result.records if r.get("event") == event]
