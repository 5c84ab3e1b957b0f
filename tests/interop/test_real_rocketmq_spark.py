"""The Spark source and sink against real Apache RocketMQ clusters (two brokers of each generation): a
batch read of a known set, a stream run twice from one checkpoint, and a write read back."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import StringType, StructField, StructType

from tests.rocketmq_cluster import VERSIONS, JavaCluster, create_topic, java_cluster
from tests.spark_support import read_source, spark, stream, to_parquet
from tests.support import unique
from tidemq.client import Message, Producer

__all__ = ["spark"]
pytestmark = [pytest.mark.e2e, pytest.mark.java_broker]


@pytest.fixture(scope="module", params=VERSIONS)
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JavaCluster]:
    yield from java_cluster(request.param, tmp_path_factory.mktemp(f"spark-rocketmq-{request.param}"))


def publish(cluster: JavaCluster, topic: str, prefix: str, count: int) -> dict[tuple[str, int, int], bytes]:
    """Send ``count`` messages spread over both brokers; where each landed -> its body."""

    async def run() -> dict[tuple[str, int, int], bytes]:
        landed = {}
        async with Producer(unique("spark-pg"), cluster.namesrv) as producer:
            for i in range(count):
                body = f"{prefix}-{i}".encode()
                r = await producer.send(Message(topic, body, tags="t", keys=f"{prefix}-{i}"))
                landed[(r.message_queue.broker_name, r.message_queue.queue_id, r.queue_offset)] = body
        return landed

    return asyncio.run(run())


def test_batch_read_returns_exactly_the_known_set(spark: SparkSession, cluster: JavaCluster) -> None:
    topic = unique("SparkBatch")
    asyncio.run(create_topic(cluster, topic, 2))
    landed = publish(cluster, topic, "b", 40)
    assert {broker for broker, _, _ in landed} == {"broker-a", "broker-b"}
    rows = read_source(spark, cluster, topic)  # type: ignore[arg-type]
    assert {(r.broker, r.queue, r.offset): bytes(r.body) for r in rows} == landed
    assert all(r.tags == "t" and r.keys == r.body.decode() for r in rows)


def test_available_now_twice_from_one_checkpoint(
    spark: SparkSession, cluster: JavaCluster, tmp_path: Path
) -> None:
    topic = unique("SparkStream")
    asyncio.run(create_topic(cluster, topic, 2))
    first = publish(cluster, topic, "first", 20)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    to_parquet(stream(spark, cluster, topic, startingOffsets="earliest"), out, checkpoint)  # type: ignore[arg-type]
    second = publish(cluster, topic, "second", 15)
    to_parquet(stream(spark, cluster, topic, startingOffsets="earliest"), out, checkpoint)  # type: ignore[arg-type]
    rows = spark.read.parquet(str(out)).collect()
    assert {(r.broker, r.queue, r.offset): bytes(r.body) for r in rows} == first | second
    assert len(rows) == 35, "each message exactly once across the two runs"


def test_write_then_read_back(spark: SparkSession, cluster: JavaCluster) -> None:
    topic = unique("SparkWrite")
    asyncio.run(create_topic(cluster, topic, 2))
    schema = StructType([StructField("body", StringType()), StructField("keys", StringType())])
    rows = [(f"order {i}", f"order-{i}") for i in range(200)]
    (
        spark.createDataFrame(rows, schema)
        .repartition(2)
        .write.format("rocketmq")
        .option("namesrv", cluster.namesrv)
        .option("topic", topic)
        .option("batchSize", "25")
        .mode("append")
        .save()
    )
    back = read_source(spark, cluster, topic)  # type: ignore[arg-type]
    assert sorted((r.body.decode(), r.keys) for r in back) == sorted(rows)
    assert {r.broker for r in back} == {"broker-a", "broker-b"}
