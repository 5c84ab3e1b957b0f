"""Shared fixtures and hooks: the real server processes most end-to-end tests use, coroutine test
functions run on their own event loop, and the ``e2e`` rule (only marked tests may start a subprocess)."""

from __future__ import annotations

import asyncio
import inspect
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import ServerProcess, TwoBrokers


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run an ``async def test_...`` on a fresh event loop (uvloop's with ``@pytest.mark.uvloop``)."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    kwargs = {name: pyfuncitem.funcargs[name] for name in names}
    loop_factory = None
    if pyfuncitem.get_closest_marker("uvloop") is not None:
        import uvloop

        loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(pyfuncitem.obj(**kwargs))
    return True


@pytest.fixture(autouse=True)
def _no_subprocess_unless_e2e(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test not marked ``e2e`` fails if it starts a subprocess, so ``-m "not e2e"`` stays in-process."""
    if request.node.get_closest_marker("e2e") is not None:
        return
    name = request.node.nodeid

    def refuse(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"{name} starts a subprocess: mark it @pytest.mark.e2e")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One real ``tidemq server`` process per test module (short delay levels so retries come fast)."""
    data = tmp_path_factory.mktemp("srv") / "data"
    proc = ServerProcess(
        data, "--delay-levels", "1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s"
    ).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def nsqd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One real ``tidemq nsqd`` process per test module, with a 1 s in-flight timeout."""
    proc = ServerProcess(
        tmp_path_factory.mktemp("nsqd") / "d", "--msg-timeout", "1000", command="nsqd"
    ).start()
    yield proc
    proc.stop()


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path / "data").start()
    yield proc
    proc.kill()


@pytest.fixture
def two_brokers(tmp_path: Path) -> Iterator[TwoBrokers]:
    """A name server and two brokers as separate processes, for failover and routing across brokers."""
    cluster = TwoBrokers.start(tmp_path)
    yield cluster
    cluster.stop()
