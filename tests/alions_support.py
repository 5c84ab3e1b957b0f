"""Running the ali-ons (Node.js) harness of interop/ali-ons from tests (see interop/ali-ons/NOTES.md)."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest

from tests.support import RawClient, ScriptRun, ServerProcess, run, run_script
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
HARNESS_TIMEOUT = 40


def node(script: str, timeout: int = HARNESS_TIMEOUT, **options: object) -> ScriptRun:
    """Run a harness script to completion; ``fail_first=3`` becomes ``--fail-first 3``."""
    return run_script([str(NODE), script], timeout, cwd=HARNESS, **options)


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
