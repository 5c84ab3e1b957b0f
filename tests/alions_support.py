"""Running the ali-ons (Node.js) harness of interop/ali-ons from tests (see interop/ali-ons/NOTES.md)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import RawClient, ServerProcess, run
from tidemq.remoting.codes import ResponseCode

HARNESS = Path(__file__).resolve().parent.parent / "interop" / "ali-ons"
NODE = shutil.which("node")


def require_harness() -> None:
    """Skip the calling test module when Node or the harness is missing (``make test`` installs both)."""
    if NODE is None:
        pytest.skip("ali-ons interop: `node` is not on PATH", allow_module_level=True)
    if not (HARNESS / "node_modules" / "ali-ons" / "package.json").is_file():
        pytest.skip(
            f"ali-ons interop: {HARNESS / 'node_modules'} is missing "
            "(run `cd interop/ali-ons && npm ci --no-audit --no-fund`)",
            allow_module_level=True,
        )


QUEUES = 4
# The harness' own --timeout (exit 2) fires first; the subprocess timeout is the hard backstop.
HARNESS_TIMEOUT = 40
HARD_MARGIN = 15


@dataclass
class NodeRun:
    rc: int
    records: list[dict[str, Any]]
    stderr: str
    argv: list[str]

    def describe(self) -> str:
        tail = self.stderr[-4000:]
        return f"`{' '.join(self.argv[1:])}` exited {self.rc}, {len(self.records)} records; stderr:\n{tail}"


def _parse(stdout: str) -> list[dict[str, Any]]:
    records = []
    for line in stdout.splitlines():
        line = line.strip()
        if line:
            records.append(json.loads(line))  # stdout must carry JSON lines only
    return records


def node(script: str, timeout: int = HARNESS_TIMEOUT, **options: object) -> NodeRun:
    """Run a harness script to completion; ``fail_first=3`` becomes ``--fail-first 3``."""
    argv = [str(NODE), script, "--timeout", str(timeout)]
    for name, value in options.items():
        argv += ["--" + name.replace("_", "-"), str(value)]
    try:
        proc = subprocess.run(
            argv, cwd=HARNESS, capture_output=True, text=True, timeout=timeout + HARD_MARGIN, check=False
        )
    except subprocess.TimeoutExpired as exc:  # subprocess.run kills the child before raising
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        raise AssertionError(
            f"`{' '.join(argv[1:])}` hung past the hard timeout;"
            f" stdout:\n{out[-2000:]}\nstderr:\n{err[-4000:]}"
        ) from None
    return NodeRun(proc.returncode, _parse(proc.stdout), proc.stderr, argv)


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def server_log(server: ServerProcess) -> str:
    try:
        return server.log_path.read_text(errors="replace")[-4000:]
    except OSError:
        return "(no server log)"


def create_topic(server: ServerProcess, topic: str, queues: int = QUEUES) -> None:
    async def go() -> None:
        c = await RawClient.open(server.broker)
        try:
            resp = await c.create_topic(topic, queues)
            assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
        finally:
            c.close()

        # The broker registers the topic with the name server; wait until the route is there,
        # because ali-ons fails a send at once when the route lookup answers TOPIC_NOT_EXIST.
        n = await RawClient.open(server.namesrv)
        try:
            deadline = time.monotonic() + 10
            while True:
                route = await n.route(topic)
                if route and route.get("queueDatas"):
                    return
                assert time.monotonic() < deadline, f"no route for {topic} after create_topic: {route}"
                await asyncio.sleep(0.1)
        finally:
            n.close()

    run(go())
