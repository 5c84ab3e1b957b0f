"""Apache RocketMQ's own Java client (4.9.8) as a test peer: ``interop/rocketmq-java/client-4.9.8`` is built
by ``make rocketmq-java-client`` into ``.cache/rocketmq-java-client`` (``peer.jar`` and its ``lib/``).
Each run is one JVM printing JSON lines (see ``tests.support.run_script``); its own logs, offsets of
broadcasting consumers and anything else it writes under ``user.home`` stay in the test's temp dir."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import ScriptRun, run_script

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / ".cache" / "rocketmq-java-client"
#: The client's pinned version (interop/rocketmq-java/client-4.9.8/pom.xml).
CLIENT_VERSION = "4.9.8"


def peer_argv(home: Path) -> list[str]:
    jar = BUILD / "peer.jar"
    if not jar.exists() or not any((BUILD / "lib").glob("rocketmq-client-*.jar")):
        pytest.fail(f"the Java test peer is missing from {BUILD}: run `make rocketmq-java-client`")
    home.mkdir(parents=True, exist_ok=True)
    return [
        "java",
        "-Xmx256m",
        "-XX:TieredStopAtLevel=1",  # short runs: start fast rather than optimise
        f"-Duser.home={home}",
        f"-Drocketmq.client.logRoot={home / 'logs'}",
        "-Drocketmq.client.logLevel=INFO",
        "-cp",
        f"{jar}:{BUILD / 'lib'}/*",
        "tidemq.interop.Peer",
    ]


class JavaPeer:
    """Runs the peer's sub-commands against one name server, each JVM's files under ``home``; with
    ``credentials`` (access key, secret key) every client signs its requests with AclClientRPCHook."""

    def __init__(self, namesrv: str, home: Path, credentials: tuple[str, str] | None = None) -> None:
        self.namesrv = namesrv
        self.home = home
        self.credentials = credentials

    def run(
        self, command: str, *args: str, timeout: int = 60, check: bool = True, **options: object
    ) -> ScriptRun:
        argv = [*peer_argv(self.home), command, "--namesrv", self.namesrv, *args]
        if self.credentials is not None:
            argv += ["--access-key", self.credentials[0], "--secret-key", self.credentials[1]]
        result = run_script(argv, timeout, **options)
        if check:
            assert result.rc == 0, result.describe()
        return result

    def admin(self, *calls: str, timeout: int = 60) -> dict[str, dict[str, Any]]:
        """Each ``mqadmin``-style call (``name:arg:arg``) once, answers by call text in the given order."""
        args: list[str] = []
        for call in calls:
            args += ["--call", call]
        result = self.run("admin", *args, timeout=timeout)
        answers = [r for r in result.records if r.get("event") == "admin"]
        assert len(answers) == len(calls), result.describe()
        return dict(zip(calls, answers, strict=True))


def events(result: ScriptRun, event: str) -> list[dict[str, Any]]:
    return [r for r in result.records if r.get("event") == event]
