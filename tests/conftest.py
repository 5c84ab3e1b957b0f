from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ServerProcess


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
