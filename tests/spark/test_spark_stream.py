"""Structured Streaming from and to topics: checkpointed runs, rate limits, consumer-group offsets."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.spark_support import (
    group_progress,
    publish_many,
    read_source,
    run_available_now,
    spark,
    stream,
    to_parquet,
)
from tests.support import ServerProcess, create_topic, free_port, run

pytestmark = pytest.mark.e2e

__all__ = ["spark"]


def keys_in(spark: SparkSession, out: Path) -> list[tuple[int, int]]:
    return sorted(
        (r.queue, r.offset) for r in spark.read.parquet(str(out)).select("queue", "offset").collect()
    )


def test_available_now_twice_from_one_checkpoint_reads_exactly_the_new_messages(
    spark: SparkSession, server: ServerProcess, tmp_path: Path
) -> None:
    run(create_topic(server.broker, "SparkStream", 2, routed_by=server.namesrv))
    publish_many(server, "SparkStream", 2, 10, "first")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    df = stream(spark, server, "SparkStream", startingOffsets="earliest")
    to_parquet(df, out, checkpoint)
    assert keys_in(spark, out) == [(q, o) for q in range(2) for o in range(10)]

    publish_many(server, "SparkStream", 2, 7, "second")
    to_parquet(stream(spark, server, "SparkStream", startingOffsets="earliest"), out, checkpoint)
    rows = spark.read.parquet(str(out)).collect()
    assert sorted((r.queue, r.offset) for r in rows) == [(q, o) for q in range(2) for o in range(17)]
    second = sorted(r.body.decode() for r in rows if r.body.startswith(b"second"))
    assert second == sorted(f"second-{q}-{i}" for q in range(2) for i in range(7))

    to_parquet(stream(spark, server, "SparkStream", startingOffsets="earliest"), out, checkpoint)
    assert len(keys_in(spark, out)) == 34  # a third run with nothing new adds nothing


def test_starting_offsets_latest_skips_what_is_already_there(
    spark: SparkSession, server: ServerProcess, tmp_path: Path
) -> None:
    run(create_topic(server.broker, "SparkLatest", 1, routed_by=server.namesrv))
    publish_many(server, "SparkLatest", 1, 5, "old")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    to_parquet(stream(spark, server, "SparkLatest"), out, checkpoint)  # default: latest
    publish_many(server, "SparkLatest", 1, 3, "new")
    to_parquet(stream(spark, server, "SparkLatest"), out, checkpoint)
    assert keys_in(spark, out) == [(0, 5), (0, 6), (0, 7)]


def test_max_offsets_per_trigger_splits_the_backlog_into_bounded_batches(
    spark: SparkSession, server: ServerProcess, tmp_path: Path
) -> None:
    run(create_topic(server.broker, "SparkLimit", 2, routed_by=server.namesrv))
    publish_many(server, "SparkLimit", 2, 20, "limited")
    df = stream(spark, server, "SparkLimit", startingOffsets="earliest", maxOffsetsPerTrigger="10")
    query = to_parquet(df, tmp_path / "out", tmp_path / "checkpoint")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [10, 10, 10, 10]
    assert keys_in(spark, tmp_path / "out") == [(q, o) for q in range(2) for o in range(20)]


def test_consumer_group_offsets_show_in_group_progress(
    spark: SparkSession, server: ServerProcess, tmp_path: Path
) -> None:
    run(create_topic(server.broker, "SparkGroup", 3, routed_by=server.namesrv))
    publish_many(server, "SparkGroup", 3, 12, "grouped")
    df = stream(spark, server, "SparkGroup", startingOffsets="earliest", consumerGroup="spark-pipeline")
    to_parquet(df, tmp_path / "out", tmp_path / "checkpoint")
    progress = {
        (r["queue"], r["consumer_offset"], r["lag"]) for r in group_progress(server, "spark-pipeline")
    }
    assert progress == {(0, 12, 0), (1, 12, 0), (2, 12, 0)}

    publish_many(server, "SparkGroup", 3, 4, "more")
    lag = {r["queue"]: r["lag"] for r in group_progress(server, "spark-pipeline")}
    assert lag == {0: 4, 1: 4, 2: 4}
    df = stream(spark, server, "SparkGroup", startingOffsets="earliest", consumerGroup="spark-pipeline")
    to_parquet(df, tmp_path / "out", tmp_path / "checkpoint")
    assert {r["queue"]: r["lag"] for r in group_progress(server, "spark-pipeline")} == {0: 0, 1: 0, 2: 0}


def test_stream_from_topic_to_topic(spark: SparkSession, server: ServerProcess, tmp_path: Path) -> None:
    run(create_topic(server.broker, "SparkPipeIn", 2, routed_by=server.namesrv))
    run(create_topic(server.broker, "SparkPipeOut", 2, routed_by=server.namesrv))
    publish_many(server, "SparkPipeIn", 2, 25, "piped")
    df = stream(spark, server, "SparkPipeIn", startingOffsets="earliest")
    upper = df.selectExpr("upper(cast(body as string)) as body", "'shout' as tags", "msg_id as keys")
    query = (
        upper.writeStream.format("rocketmq")
        .option("namesrv", server.namesrv)
        .option("topic", "SparkPipeOut")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    run_available_now(query)
    sources = {r.msg_id: r.body for r in read_source(spark, server, "SparkPipeIn")}
    rows = read_source(spark, server, "SparkPipeOut")
    assert len(rows) == 50 and all(r.tags == "shout" for r in rows)
    assert {r.keys: r.body for r in rows} == {k: v.upper() for k, v in sources.items()}


def test_stream_errors_name_the_option(spark: SparkSession, server: ServerProcess, tmp_path: Path) -> None:
    bad = [
        ({"topic": "NoSuchStreamTopic"}, "topic: topic 'NoSuchStreamTopic' does not exist"),
        ({"maxOffsetsPerTrigger": "-5"}, "maxOffsetsPerTrigger: -5 is out of range"),
        ({"endingOffsets": "latest"}, "endingOffsets: only for batch queries"),
        ({"namesrv": f"127.0.0.1:{free_port()}"}, "namesrv: cannot use the name server"),
    ]
    run(create_topic(server.broker, "SparkStreamBad", 1, routed_by=server.namesrv))
    for i, (options, needle) in enumerate(bad):
        with pytest.raises(Exception) as info:
            to_parquet(
                stream(spark, server, "SparkStreamBad", **options), tmp_path / f"out{i}", tmp_path / f"cp{i}"
            )
        assert needle in str(info.value), str(info.value)
        assert not list((tmp_path / f"out{i}").glob("part-*"))
