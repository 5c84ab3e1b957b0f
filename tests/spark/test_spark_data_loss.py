"""failOnDataLoss, as with Spark's Kafka source, once retention really removed offsets a query wants.

The server keeps 64 KiB segments for about a second, so retention (checked every 10 s) deletes the
oldest messages while the test watches.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.spark_support import publish_many, read_source, spark, stream, to_parquet
from tests.support import ServerProcess, create_topic, run, wait_for
from tidemq.client import api
from tidemq.remoting.transport import connect
from tidemq.spark.offsets import DataLossError, QueueRange
from tidemq.spark.options import read_options
from tidemq.spark.pull import read_range

pytestmark = pytest.mark.e2e

__all__ = ["spark"]

TOPIC = "SparkLoss"


@pytest.fixture(scope="module")
def forgetful(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("forgetful") / "data"
    proc = ServerProcess(data, "--segment-size", "65536", "--retention-hours", "0.0003").start()
    yield proc
    proc.stop()


def min_offset(server: ServerProcess) -> int:
    async def ask() -> int:
        conn = await connect("127.0.0.1", server.broker_port)
        try:
            return await api.get_min_offset(conn, TOPIC, 0)
        finally:
            conn.close()

    return int(run(ask()))


def stream_to_parquet(spark: SparkSession, server: ServerProcess, out: Path, **options: str) -> None:
    df = stream(spark, server, TOPIC, **{"startingOffsets": "earliest", **options})
    to_parquet(df, out / "data", out / "checkpoint")


@pytest.fixture(scope="module")
def lost(
    spark: SparkSession, forgetful: ServerProcess, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, int]:
    """A stream read offsets 0-4, then retention removed what came next; returns (its dir, min offset)."""
    out = tmp_path_factory.mktemp("lossy-stream")
    run(create_topic(forgetful.broker, TOPIC, 1, routed_by=forgetful.namesrv))
    publish_many(forgetful, TOPIC, 1, 5, "early", size=1000)
    stream_to_parquet(spark, forgetful, out)
    publish_many(forgetful, TOPIC, 1, 300, "late", size=1000, batch=10)
    low = wait_for(lambda: min_offset(forgetful) > 5 and min_offset(forgetful), timeout=90, interval=1.0)
    return out, int(low)


def test_stream_fails_when_offsets_were_removed_naming_failondataloss(
    spark: SparkSession, forgetful: ServerProcess, lost: tuple[Path, int]
) -> None:
    out, _ = lost
    with pytest.raises(Exception) as info:
        stream_to_parquet(spark, forgetful, out)
    message = str(info.value)
    assert "are no longer on the broker" in message and "failOnDataLoss to false" in message, message


def test_stream_skips_removed_offsets_when_told_to(
    spark: SparkSession, forgetful: ServerProcess, lost: tuple[Path, int]
) -> None:
    out, low = lost
    stream_to_parquet(spark, forgetful, out, failOnDataLoss="false")
    offsets = sorted(r.offset for r in spark.read.parquet(str(out / "data")).select("offset").collect())
    assert offsets[:5] == [0, 1, 2, 3, 4]
    assert offsets[5] >= low and offsets[5:] == list(range(offsets[5], 305))


def test_batch_read_below_the_min_offset(
    spark: SparkSession, forgetful: ServerProcess, lost: tuple[Path, int]
) -> None:
    _, low = lost
    start = json.dumps({TOPIC: {"broker-a:0": 0}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        read_source(spark, forgetful, TOPIC, startingOffsets=start)
    rows = read_source(spark, forgetful, TOPIC, startingOffsets=start, failOnDataLoss="false")
    assert rows[0].offset >= low and [r.offset for r in rows] == list(range(rows[0].offset, 305))
    assert rows[-1].body.startswith(b"late-0-299")
    assert len(read_source(spark, forgetful, TOPIC)) == len(rows)  # earliest starts at the min offset


def test_executor_notices_offsets_removed_after_planning(
    forgetful: ServerProcess, lost: tuple[Path, int]
) -> None:
    """A range planned before retention ran: the pull itself finds the start gone."""
    _, low = lost
    rng = QueueRange(TOPIC, "broker-a", 0, forgetful.broker, 0, low + 3)
    strict = read_options({"namesrv": forgetful.namesrv, "topic": TOPIC}, "batch")
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        list(read_range(rng, strict))
    lenient = read_options({"namesrv": forgetful.namesrv, "topic": TOPIC, "failOnDataLoss": "false"}, "batch")
    batches = list(read_range(rng, lenient))
    current = min_offset(forgetful)
    assert sum(b.num_rows for b in batches) == low + 3 - current
    assert batches[0].column("offset").to_pylist()[0] == current
