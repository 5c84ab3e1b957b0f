"""Exactly-once into Spark's parquet sink across a driver killed with SIGKILL in the middle of a batch.

The streaming query runs as its own driver process (tests/spark_scripts/stream_to_parquet.py). The first
run stalls one task of its third micro-batch; once the other task's parquet file is on disk but not yet
committed, the whole driver (Python, its JVM, its workers) is killed. The second run resumes from the
checkpoint, replays that batch over the same offset ranges, and reads on: the output must hold every
message exactly once.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.spark_support import parquet_files, publish_many, spark
from tests.support import ServerProcess, create_topic, run, wait_for

pytestmark = pytest.mark.e2e

__all__ = ["spark"]

SCRIPT = Path(__file__).parents[1] / "spark_scripts" / "stream_to_parquet.py"
TOPIC = "SparkExactlyOnce"


def committed_files(out: Path) -> set[str]:
    """Files the sink committed: the ones its _spark_metadata log lists (readers see only these)."""
    names: set[str] = set()
    for entry in (out / "_spark_metadata").glob("[0-9]*"):
        for line in entry.read_text().splitlines()[1:]:
            names.add(Path(json.loads(line)["path"]).name)
    return names


def driver(
    server: ServerProcess, out: Path, checkpoint: Path, log: Path, *stall: str
) -> subprocess.Popen[bytes]:
    args = [sys.executable, str(SCRIPT), "--namesrv", server.namesrv, "--topic", TOPIC]
    args += ["--out", str(out), "--checkpoint", str(checkpoint), "--max-per-trigger", "20", *stall]
    with open(log, "ab") as sink:
        # Its own session, so the driver's JVM and Python workers can be killed together, by its PID.
        return subprocess.Popen(args, stdout=sink, stderr=sink, start_new_session=True)


def test_killed_driver_resumes_from_checkpoint_with_every_message_once(
    spark: SparkSession, server: ServerProcess, tmp_path: Path
) -> None:
    run(create_topic(server.broker, TOPIC, 2, routed_by=server.namesrv))
    publish_many(server, TOPIC, 2, 40, "before")
    out, checkpoint, marker, log = (
        tmp_path / "out",
        tmp_path / "checkpoint",
        tmp_path / "stalled",
        tmp_path / "log",
    )

    first = driver(
        server, out, checkpoint, log, "--stall-queue", "1", "--stall-offset", "25", "--marker", str(marker)
    )
    stalled_pid = 0
    try:
        wait_for(lambda: marker.exists() or first.poll() is not None, timeout=240, interval=0.2)
        assert first.poll() is None, log.read_text(errors="replace")[-3000:]
        stalled_pid = int(wait_for(lambda: marker.read_text().strip(), timeout=10))
        # The queue-0 task of the stalled batch has written its file; nothing commits it.
        wait_for(lambda: parquet_files(out) - committed_files(out), timeout=120, interval=0.2)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
        if stalled_pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stalled_pid, signal.SIGKILL)
    assert (checkpoint / "offsets" / "2").exists() and not (checkpoint / "commits" / "2").exists()
    orphans = parquet_files(out) - committed_files(out)
    assert orphans

    publish_many(server, TOPIC, 2, 10, "after")
    second = driver(server, out, checkpoint, log)
    try:
        assert second.wait(240) == 0, log.read_text(errors="replace")[-3000:]
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
            second.wait(30)

    rows = spark.read.parquet(str(out)).select("queue", "offset", "body").collect()
    keys = sorted((r.queue, r.offset) for r in rows)
    assert keys == [(q, o) for q in range(2) for o in range(50)]
    bodies = sorted(r.body.decode() for r in rows)
    expected = [f"before-{q}-{i}" for q in range(2) for i in range(40)]
    expected += [f"after-{q}-{i}" for q in range(2) for i in range(10)]
    assert bodies == sorted(expected)
    assert orphans <= parquet_files(out) and not orphans & committed_files(out)
