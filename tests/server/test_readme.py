"""The README's examples run as written: each Python snippet is cut out of README.md (or the user doc it
links to) and run as a script against a real ``tidemq server``, with only the default addresses swapped for
the test server's ports."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support import RawClient, ServerProcess, run, wait_for
from tidemq.client import Message, Producer

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CLIENTS_DOC = ROOT / "docs" / "clients.md"
SNIPPET_TIMEOUT_S = 120
SPARK_TIMEOUT_S = 300


def snippet(marker: str, doc: Path = README) -> str:
    """The one ```python block of ``doc`` that contains ``marker``."""
    blocks = re.findall(r"^```python\n(.*?)^```", doc.read_text(), flags=re.S | re.M)
    found = [b for b in blocks if marker in b]
    assert len(found) == 1, f"{len(found)} python blocks of {doc.name} contain {marker!r}"
    return found[0]


def run_snippet(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = cwd / "snippet.py"
    script.write_text(code)
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=SNIPPET_TIMEOUT_S,
        check=False,
    )


@pytest.fixture(scope="module")
def readme_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("readme") / "data").start()
    yield proc
    proc.stop()


def command_block(heading: str) -> list[str]:
    """The shell commands of the first plain ``` block after ``heading``, comments cut off."""
    text = README.read_text()
    block = re.search(r"^```\n(.*?)^```", text[text.index(heading) :], flags=re.S | re.M)
    assert block is not None, heading
    return [line.split("  #", 1)[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_command_line_examples_run_as_written(fresh_server: ServerProcess, tmp_path: Path) -> None:
    """Each line through bash, with the name server given as mqadmin users give it ($NAMESRV_ADDR) and
    ``<msg id>`` replaced by one that ``produce`` printed (on a server of its own: the examples share
    their topic with the Python snippet's)."""
    readme_server = fresh_server
    env = {
        **os.environ,
        "NAMESRV_ADDR": readme_server.namesrv,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    outputs: dict[str, str] = {}
    msg_id = ""
    for line in command_block("## Command line"):
        command = line.replace("<msg id>", msg_id)
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=SNIPPET_TIMEOUT_S,
            check=False,
        )
        assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stderr[-3000:]}"
        outputs[line] = done.stdout
        if "seq 1000 | tidemq produce" in line:
            sent = [json.loads(row) for row in done.stdout.splitlines()]
            assert len(sent) == 1000
            msg_id = sent[7]["msg_id"]
    consumed = next(out for line, out in outputs.items() if line.startswith("tidemq consume"))
    assert len(consumed.splitlines()) == 10
    got = next(out for line, out in outputs.items() if line.startswith("tidemq message get"))
    assert msg_id and msg_id in got
    queried = next(out for line, out in outputs.items() if line.startswith("tidemq message query"))
    assert "order-7" in queried


def test_python_client_snippet_produces_and_consumes(readme_server: ServerProcess, tmp_path: Path) -> None:
    code = snippet('"order-producer"').replace("127.0.0.1:9876", readme_server.namesrv)
    done = run_snippet(code, tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 34, done.stdout
    assert sum(" paid " in line for line in lines) == 1
    assert all(line.startswith("orders ") for line in lines)


def test_features_snippet_commits_filters_and_delivers_on_time(
    readme_server: ServerProcess, tmp_path: Path
) -> None:
    """The transaction, SQL92 and timer example: the committed order and the timer message arrive, the
    rolled-back order and the message the filter leaves out never do."""
    code = snippet("send_in_transaction", CLIENTS_DOC).replace("127.0.0.1:9876", readme_server.namesrv)
    done = run_snippet(code, tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert lines[:2] == ["order 1 COMMIT_MESSAGE", "order 2 ROLLBACK_MESSAGE"], done.stdout
    assert sorted(lines[2:]) == ["received b'in 2 s'", "received b'order 1'"], done.stdout


def test_nsq_client_snippet_publishes_and_consumes(readme_server: ServerProcess, tmp_path: Path) -> None:
    code = (
        snippet("from tidemq.nsq.client import")
        .replace("127.0.0.1:4150", readme_server.nsqd)
        .replace("127.0.0.1:4161", readme_server.lookupd_http)
    )
    done = run_snippet(code, tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    assert len(done.stdout.splitlines()) == 4, done.stdout
    for body in ("b'{\"id\": 1}'", "b'a'", "b'b'", "b'later'"):
        assert body in done.stdout, done.stdout


def test_spark_snippet_writes_windows_to_parquet_and_a_topic(
    readme_server: ServerProcess, tmp_path: Path
) -> None:
    """The streaming pipeline runs until stopped: it is stopped (SIGTERM, by PID) once both sinks hold
    closed windows, which needs events far enough past the 2-minute watermark."""
    start = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
    categories = ["books", "games", "garden"]

    async def publish() -> None:
        async with Producer("readme-orders", readme_server.namesrv) as producer:
            batch = [
                Message(
                    "orders",
                    json.dumps(
                        {
                            "category": categories[i % 3],
                            "amount": 10.0,
                            "ts": (start + timedelta(seconds=10 * i)).isoformat(),
                        }
                    ).encode(),
                )
                for i in range(120)  # 20 minutes of event time: four 5-minute windows close
            ]
            await producer.send_batch(batch[:60])
            await producer.send_batch(batch[60:])

    run(publish())
    code = snippet("from tidemq.spark import").replace("127.0.0.1:9876", readme_server.namesrv)
    script = tmp_path / "pipeline.py"
    script.write_text(code)
    log = open(tmp_path / "spark.log", "wb")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, stdout=log, stderr=log)
    try:
        stats = tmp_path / "out" / "stats"

        def parquet_rows() -> int:
            if not stats.is_dir() or not any(stats.glob("*.parquet")):
                return 0
            try:
                return int(pq.read_table(stats).num_rows)
            except pa.ArrowException:  # a part file still being written
                return 0

        wait_for(lambda: parquet_rows() > 0 or proc.poll() is not None, timeout=SPARK_TIMEOUT_S)
        assert proc.poll() is None, (tmp_path / "spark.log").read_text(errors="replace")[-4000:]

        async def published() -> int:
            c = await RawClient.open(readme_server.broker)
            count = 0
            for q in range(16):  # however many queues auto-creation gave it
                count += len(await c.drain("order-stats", q))
            c.close()
            return count

        deadline = time.monotonic() + SPARK_TIMEOUT_S
        while run(published()) == 0 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(1)
        assert run(published()) > 0, "no window results were published to order-stats"
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
        log.close()
