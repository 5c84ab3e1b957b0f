"""Writing DataFrames to topics with ``format("rocketmq")``, and reading them back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import Row, SparkSession
from pyspark.sql.types import BinaryType, MapType, StringType, StructField, StructType

from tests.spark_support import jobs_started, read_source, spark
from tests.support import ServerProcess, create_topic, free_port, run

pytestmark = pytest.mark.e2e

__all__ = ["spark"]


@pytest.fixture(scope="module")
def small_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server that refuses requests over 2 KiB, to see the broker's reason reach Spark."""
    proc = ServerProcess(tmp_path_factory.mktemp("small") / "data", "--max-message-size", "2048").start()
    yield proc
    proc.stop()


def write(df, server: ServerProcess, **options: str) -> None:  # type: ignore[no-untyped-def]
    writer = df.write.format("rocketmq").option("namesrv", server.namesrv).mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def test_round_trip_dataframe_to_topics_and_back(spark: SparkSession, server: ServerProcess) -> None:
    run(create_topic(server.broker, "SparkWriteA", 2, routed_by=server.namesrv))
    run(create_topic(server.broker, "SparkWriteB", 2, routed_by=server.namesrv))
    schema = StructType(
        [
            StructField("topic", StringType()),
            StructField("body", StringType()),
            StructField("keys", StringType()),
            StructField("tags", StringType()),
            StructField("properties", MapType(StringType(), StringType())),
            StructField("ignored", StringType()),
        ]
    )
    rows = [
        (
            "SparkWriteA" if i % 3 else "SparkWriteB",
            f"order {i} \u00e9",
            f"order-{i}",
            "big" if i % 2 else None,
            {"n": str(i)},
            "x",
        )
        for i in range(600)
    ]
    write(spark.createDataFrame(rows, schema).repartition(3), server, batchSize="50")

    back = read_source(spark, server, "SparkWriteA") + read_source(spark, server, "SparkWriteB")
    assert len(back) == 600
    got = sorted((r.topic, r.body.decode(), r.keys, r.tags, r.properties["n"]) for r in back)
    assert got == sorted((t, b, k, g, p["n"]) for t, b, k, g, p, _ in rows)
    assert {r.queue for r in back} == {0, 1}  # batches spread over the queues
    assert all("ignored" not in r.properties for r in back)


def test_binary_bodies_and_topic_option(spark: SparkSession, server: ServerProcess) -> None:
    run(create_topic(server.broker, "SparkWriteBin", 1, routed_by=server.namesrv))
    bodies = [bytes([i, 255 - i, 0, 10]) for i in range(40)]
    df = spark.createDataFrame([(b, "ignored-topic-column") for b in bodies], "body binary, topic string")
    write(df, server, topic="SparkWriteBin")
    assert sorted(r.body for r in read_source(spark, server, "SparkWriteBin")) == sorted(bodies)


def test_broker_refusal_fails_the_task_with_the_brokers_reason(
    spark: SparkSession, small_server: ServerProcess
) -> None:
    run(create_topic(small_server.broker, "SparkWriteSmall", 1, routed_by=small_server.namesrv))
    df = spark.createDataFrame([Row(body=b"y" * 4000)], StructType([StructField("body", BinaryType())]))
    with pytest.raises(Exception) as info:
        write(df, small_server, topic="SparkWriteSmall")
    message = str(info.value)
    assert "MESSAGE_ILLEGAL" in message and "exceeds the maximum 2048" in message, message
    assert read_source(spark, small_server, "SparkWriteSmall") == []


@pytest.mark.parametrize(
    ("frame", "options", "needle"),
    [
        ("id as body", {"topic": "T"}, "body: column 'body' must be binary or string, not bigint"),
        ("cast(id as string) as payload", {"topic": "T"}, "body: the DataFrame has no 'body' column"),
        ("cast(id as string) as body", {}, "topic: give the 'topic' option or a 'topic' column"),
        ("cast(id as string) as body, id as tags", {"topic": "T"}, "tags: column 'tags' must be a string"),
        (
            "cast(id as string) as body",
            {"topic": "bad topic!"},
            "topic: 'bad topic!' is not a valid topic name",
        ),
        ("cast(id as string) as body", {"topic": "T", "batchSize": "0"}, "batchSize: 0 is out of range"),
    ],
)
def test_bad_frames_and_options_fail_on_the_driver(
    spark: SparkSession, server: ServerProcess, frame: str, options: dict[str, str], needle: str
) -> None:
    group = f"bad-write-{time.monotonic_ns()}"
    spark.sparkContext.setJobGroup(group, "bad write")
    with pytest.raises(Exception) as info:
        write(spark.range(3).selectExpr(*frame.split(", ")), server, **options)
    assert needle in str(info.value), str(info.value)
    assert jobs_started(spark, group) == []
    spark.sparkContext.setJobGroup("default", "")


def test_null_body_fails_the_task_naming_the_column(spark: SparkSession, server: ServerProcess) -> None:
    df = spark.createDataFrame([("a",), (None,)], "body string")
    with pytest.raises(Exception, match="body: row 1 of a batch has a null body"):
        write(df.coalesce(1), server, topic="SparkWriteNull")


def test_unreachable_name_server_fails_the_write_on_the_driver(spark: SparkSession, tmp_path: Path) -> None:
    df = spark.createDataFrame([("a",)], "body string")
    with pytest.raises(Exception, match=r"namesrv: cannot use the name server at 127\.0\.0\.1"):
        df.write.format("rocketmq").option("namesrv", f"127.0.0.1:{free_port()}").option("topic", "T").mode(
            "append"
        ).save()


def test_overwrite_is_refused_append_is_required(spark: SparkSession, server: ServerProcess) -> None:
    df = spark.createDataFrame([("a",)], "body string")

    def writer():  # type: ignore[no-untyped-def]
        return df.write.format("rocketmq").option("namesrv", server.namesrv).option("topic", "SparkWriteMode")

    with pytest.raises(Exception, match="mode: 'overwrite' is not possible"):
        writer().mode("overwrite").save()
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        writer().save()  # Spark's default, ErrorIfExists
    writer().mode("append").save()
    assert [r.body for r in read_source(spark, server, "SparkWriteMode")] == [b"a"]
