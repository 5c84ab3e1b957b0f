"""Batch reads through ``format("rocketmq")`` against a real ``tidemq server``, in a real local Spark."""

from __future__ import annotations

import json
import time

import pytest
from pyspark.sql import SparkSession

from tests.spark_support import jobs_started, publish, publish_many, read_source, spark
from tests.support import ServerProcess, create_topic, free_port, run
from tidemq.spark import SCHEMA

pytestmark = pytest.mark.e2e

__all__ = ["spark"]


@pytest.fixture(scope="module")
def known(server: ServerProcess) -> dict[int, list]:  # type: ignore[type-arg]
    """Topic SparkBatch: queue 0 holds five messages, queue 1 three, queue 2 none."""
    run(create_topic(server.broker, "SparkBatch", 3, routed_by=server.namesrv))
    q0 = publish(
        server,
        "SparkBatch",
        0,
        [b"zero", b"one", b"two", b"three", b"four"],
        tags=["red", "blue", "red", None, "green"],
        keys=["k0", "k1", None, "k3", "k4 k44"],
        properties={"origin": "test"},
    )
    q1 = publish(server, "SparkBatch", 1, [b"\x00\xffbin", b"-", b"x" * 5000], tags=["blue", None, "red"])
    return {0: q0, 1: q1}


def test_batch_read_returns_every_message_with_every_column(
    spark: SparkSession,
    server: ServerProcess,
    known: dict[int, list],  # type: ignore[type-arg]
) -> None:
    before = time.time() - 300
    df = spark.read.format("rocketmq").option("namesrv", server.namesrv).option("topic", "SparkBatch").load()
    assert df.schema == SCHEMA
    assert df.columns == [
        "topic",
        "broker",
        "queue",
        "offset",
        "msg_id",
        "keys",
        "tags",
        "body",
        "properties",
        "born_timestamp",
        "store_timestamp",
        "reconsume_times",
    ]
    assert df.rdd.getNumPartitions() == 2  # one per queue with data; the empty queue 2 gets none
    rows = sorted(df.collect(), key=lambda r: (r.queue, r.offset))
    expected = known[0] + known[1]
    assert [(r.queue, r.offset) for r in rows] == [(p.queue, p.offset) for p in expected]
    assert [(r.queue, r.offset) for r in rows] == [
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (0, 4),
        (1, 0),
        (1, 1),
        (1, 2),
    ]
    for row, sent in zip(rows, expected, strict=True):
        assert row.topic == "SparkBatch" and row.broker == "broker-a"
        assert row.body == sent.body
        assert row.msg_id == sent.msg_id
        assert row.tags == sent.tags
        assert row.keys == sent.keys
        assert row.properties["UNIQ_KEY"] == sent.msg_id
        assert row.reconsume_times == 0
        born, stored = row.born_timestamp.timestamp(), row.store_timestamp.timestamp()
        assert before < born <= stored + 1 < time.time() + 60
    assert all(r.properties.get("origin") == "test" for r in rows[:5])
    assert "origin" not in rows[5].properties


def test_starting_and_ending_offsets_select_exact_ranges(
    spark: SparkSession,
    server: ServerProcess,
    known: dict[int, list],  # type: ignore[type-arg]
) -> None:
    rows = read_source(
        spark,
        server,
        "SparkBatch",
        startingOffsets=json.dumps({"SparkBatch": {"broker-a:0": 2, "broker-a:1": -1}}),
        endingOffsets=json.dumps({"SparkBatch": {"broker-a:0": 4}}),
    )
    assert [(r.queue, r.offset, r.body) for r in rows] == [(0, 2, b"two"), (0, 3, b"three")]

    rows = read_source(
        spark,
        server,
        "SparkBatch",
        startingOffsets=json.dumps({"SparkBatch": {"broker-a:1": 1}}),
        endingOffsets=json.dumps({"SparkBatch": {"broker-a:0": 1, "broker-a:1": -1}}),
    )
    assert [(r.queue, r.offset) for r in rows] == [(0, 0), (1, 1), (1, 2)]


def test_tag_filter_returns_only_matching_messages_at_their_offsets(
    spark: SparkSession,
    server: ServerProcess,
    known: dict[int, list],  # type: ignore[type-arg]
) -> None:
    rows = read_source(spark, server, "SparkBatch", tags="red || green")
    assert [(r.queue, r.offset, r.tags) for r in rows] == [
        (0, 0, "red"),
        (0, 2, "red"),
        (0, 4, "green"),
        (1, 2, "red"),
    ]
    assert [r.offset for r in read_source(spark, server, "SparkBatch", tags="blue", pullBatchSize="1")] == [
        1,
        0,
    ]


def test_multiple_topics_in_one_read(
    spark: SparkSession, server: ServerProcess, known: dict[int, list]
) -> None:  # type: ignore[type-arg]
    run(create_topic(server.broker, "SparkBatchOther", 1, routed_by=server.namesrv))
    publish(server, "SparkBatchOther", 0, [b"a", b"b"])
    rows = read_source(spark, server, "SparkBatch, SparkBatchOther")
    assert {r.topic for r in rows} == {"SparkBatch", "SparkBatchOther"}
    assert len(rows) == 10


@pytest.mark.parametrize(
    ("options", "needles"),
    [
        ({"topic": "NoSuchTopic"}, ["topic", "NoSuchTopic", "does not exist"]),
        ({"startingOffsets": "{not json"}, ["startingOffsets", "JSON"]),
        (
            {"startingOffsets": '{"SparkBatch": {"broker-a:9": 0}}'},
            ["startingOffsets", "broker-a:9", "no queue"],
        ),
        ({"startingOffsets": '{"SparkBatch": {"broker-z:0": 0}}'}, ["startingOffsets", "broker-z:0"]),
        ({"startingOffsets": '{"Other": {"broker-a:0": 0}}'}, ["startingOffsets", "Other", "not one of"]),
        ({"endingOffsets": '{"SparkBatch": {"broker-a:0": 99}}'}, ["endingOffsets", "past the queue's end"]),
        ({"startingOffsets": "latest"}, ["startingOffsets", "not allowed in a batch"]),
        ({"pullBatchSize": "zero"}, ["pullBatchSize", "not an integer"]),
        ({"failOnDataLoss": "maybe"}, ["failOnDataLoss", "true or false"]),
        ({"tags": "a || || b"}, ["tags", "not a tag expression"]),
        ({"topic": ""}, ["topic", "required"]),
    ],
)
def test_bad_options_fail_on_the_driver_naming_the_option(
    spark: SparkSession,
    server: ServerProcess,
    known: dict[int, list],  # type: ignore[type-arg]
    options: dict[str, str],
    needles: list[str],
) -> None:
    group = f"bad-read-{time.monotonic_ns()}"
    spark.sparkContext.setJobGroup(group, "bad input")
    reader = spark.read.format("rocketmq").option("namesrv", server.namesrv).option("topic", "SparkBatch")
    for key, value in options.items():
        reader = reader.option(key, value)
    with pytest.raises(Exception) as info:
        reader.load().collect()
    message = str(info.value)
    for needle in needles:
        assert needle in message, message
    assert jobs_started(spark, group) == []
    spark.sparkContext.setJobGroup("default", "")


def test_unreachable_name_server_is_named(spark: SparkSession) -> None:
    dead = f"127.0.0.1:{free_port()}"
    with pytest.raises(Exception, match=r"namesrv: cannot use the name server at 127\.0\.0\.1"):
        spark.read.format("rocketmq").option("namesrv", dead).option("topic", "T").load().collect()
    with pytest.raises(Exception, match="namesrv: 'nonsense' is not host:port"):
        spark.read.format("rocketmq").option("namesrv", "nonsense").option("topic", "T").load().collect()


@pytest.mark.parametrize("pull_batch", ["500", "1000"])
def test_bigger_pulls_read_exactly_the_known_set(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, pull_batch: str
) -> None:
    """``pullBatchSize`` at a broker's ``--max-transfer-count`` (500 records an answer), and above it (every
    answer shorter than asked, so the pulls in flight are asked again from where the answer ended)."""
    wide = ServerProcess(tmp_path_factory.mktemp("wide") / "data", "--max-transfer-count", "500").start()
    try:
        run(create_topic(wide.broker, "SparkWide", 2, routed_by=wide.namesrv))
        publish_many(wide, "SparkWide", 2, 1_300, "w", batch=100)
        rows = read_source(spark, wide, "SparkWide", pullBatchSize=pull_batch)
    finally:
        wide.stop()
    assert [(r.queue, r.offset) for r in rows] == [(q, i) for q in range(2) for i in range(1_300)]
    assert [r.body for r in rows] == [f"w-{q}-{i}".encode() for q in range(2) for i in range(1_300)]
