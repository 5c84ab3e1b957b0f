"""Spark as a cluster against a real two-broker RocketMQ cluster: a standalone master and two workers run a
streaming job (tests/spark_scripts/cluster_stream.py) from a topic into parquet and into a result topic.
One worker is killed with its executor mid-stream; the job goes on on the other one. Parquet ends with
every message exactly once; the result topic (an at-least-once sink) holds every result."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.consumer_support import drain
from tests.rocketmq_cluster import VERSIONS, JavaCluster, create_topic, java_cluster
from tests.spark_cluster import SparkCluster
from tests.support import unique, wait_for
from tidemq.client import Message, Producer

pytestmark = [pytest.mark.e2e, pytest.mark.java_broker]
SCRIPT = Path(__file__).parents[1] / "spark_scripts" / "cluster_stream.py"
MESSAGES = 400
JOB_TIMEOUT_S = 240.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JavaCluster]:
    """The current generation only: the Spark connector's broker conversation is the same on both, and
    test_real_rocketmq_spark covers the 4.x broker."""
    yield from java_cluster(VERSIONS[0], tmp_path_factory.mktemp("spark-cluster-rocketmq"))


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    spark = SparkCluster(tmp_path_factory.mktemp("spark-standalone")).start(workers=2)
    try:
        yield spark
    finally:
        spark.stop()


def committed_rows(out: Path) -> list[dict[str, object]]:
    """The rows of the parquet files the sink committed (listed in its _spark_metadata log)."""
    files: set[str] = set()
    for entry in (out / "_spark_metadata").glob("[0-9]*"):
        for line in entry.read_text().splitlines()[1:]:
            files.add(Path(json.loads(line)["path"]).name)
    rows: list[dict[str, object]] = []
    for name in sorted(files):
        try:
            rows += pq.read_table(out / name).to_pylist()
        except (OSError, pa.ArrowException):
            return []
    return rows


def test_stream_survives_a_worker_kill_with_every_message_exactly_once_in_parquet(
    cluster: JavaCluster, spark_cluster: SparkCluster, tmp_path: Path
) -> None:
    topic, result_topic = unique("SparkClusterIn"), unique("SparkClusterOut")

    async def publish() -> set[tuple[str, int, int]]:
        await create_topic(cluster, topic, 2)
        await create_topic(cluster, result_topic, 2)
        landed = set()
        async with Producer(unique("pg"), cluster.namesrv) as producer:
            for start in range(0, MESSAGES, 20):
                for i in range(start, start + 20):
                    r = await producer.send(Message(topic, b"m%d" % i))
                    landed.add((r.message_queue.broker_name, r.message_queue.queue_id, r.queue_offset))
        return landed

    landed = asyncio.run(publish())
    out, log = tmp_path / "out", tmp_path / "driver.log"
    args = [sys.executable, str(SCRIPT), "--master", spark_cluster.url, "--namesrv", cluster.namesrv]
    args += ["--topic", topic, "--result-topic", result_topic, "--out", str(out)]
    args += ["--checkpoints", str(tmp_path / "checkpoints"), "--max-per-trigger", "40"]
    with open(log, "ab") as sink:
        driver = subprocess.Popen(
            args, stdout=sink, stderr=sink, env=spark_cluster.env(), start_new_session=True
        )
    try:
        # Two micro-batches in, kill a worker with its executor and their Python workers.
        wait_for(lambda: len(committed_rows(out)) >= 80 or driver.poll() is not None, timeout=JOB_TIMEOUT_S)
        assert driver.poll() is None, log.read_text(errors="replace")[-4000:]
        spark_cluster.workers[0].kill_group()
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while len(committed_rows(out)) < MESSAGES and time.monotonic() < deadline and driver.poll() is None:
            time.sleep(1)
        rows = committed_rows(out)
        keys = [(str(r["broker"]), int(str(r["queue"])), int(str(r["offset"]))) for r in rows]
        driver_log = log.read_text(errors="replace")
        assert len(keys) == MESSAGES, f"{len(keys)} rows in parquet:\n{driver_log[-3000:]}"
        assert set(keys) == landed, "parquet holds every message exactly once"
        assert "Lost executor" in driver_log, "the killed worker's executor was lost mid-stream"

        # The sink is at-least-once: a batch the killed worker was writing may be there twice.
        results = asyncio.run(
            drain(
                cluster.namesrv,
                result_topic,
                MESSAGES,
                timeout=JOB_TIMEOUT_S,
                distinct=lambda m: json.loads(m.body)["source"],
            )
        )
        sources = {json.loads(m.body)["source"] for m in results}
        assert sources == {f"{b}:{q}:{o}" for b, q, o in landed}
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(10)
