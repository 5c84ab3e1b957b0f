"""The source's ``sql`` option (a broker-side SQL92 filter on message properties) and its ``accessKey`` /
``secretKey`` options against a broker with ACL on, in a real local Spark."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.spark_support import (
    group_progress,
    jobs_started,
    read_source,
    run_available_now,
    spark,
    stream,
    to_parquet,
)
from tests.support import ServerProcess, create_topic, eventually, run, unique
from tidemq.client import Message, MessageQueue, Producer
from tidemq.client.admin import Admin
from tidemq.client.config import ClientConfig
from tidemq.client.instance import MQClientError

pytestmark = pytest.mark.e2e

__all__ = ["spark"]

SQL = "a > 5 AND region IN ('eu','us')"


def send_props(
    namesrv: str, topic: str, rows: list[dict[str, str]], credentials: tuple[str, str] | None = None
) -> list[int]:
    """One message per row to queue 0, the row as its properties; returns the queue offsets."""

    async def go() -> list[int]:
        config = ClientConfig(namesrv_addr=namesrv, credentials=credentials)
        async with Producer(unique("spark-sql-producer"), config=config) as producer:
            await producer.queues_for(topic)
            mq = MessageQueue(topic, "broker-a", 0)
            out = []
            for i, props in enumerate(rows):
                msg = Message(topic, f"m{i}".encode(), properties=props)
                out.append((await producer.send(msg, queue=mq)).queue_offset)
            return out

    return asyncio.run(go())


ROWS = [
    {"a": "7", "region": "eu"},  # match
    {"a": "3", "region": "eu"},
    {"a": "9", "region": "ap"},
    {"region": "us"},  # a missing: unknown, no match
    {"a": "6", "region": "us"},  # match
    {"a": "x", "region": "us"},  # not a number: Java skips it
]


def test_batch_sql_returns_only_matching_messages_at_their_offsets(
    spark: SparkSession, server: ServerProcess
) -> None:
    topic = unique("SparkSql")
    run(create_topic(server.broker, topic, 1, routed_by=server.namesrv))
    offsets = send_props(server.namesrv, topic, ROWS)
    rows = read_source(spark, server, topic, sql=SQL, pullBatchSize="2")
    assert [(r.offset, r.body) for r in rows] == [(offsets[0], b"m0"), (offsets[4], b"m4")]
    assert rows[0].properties["region"] == "eu"


def test_stream_commits_past_queues_that_hold_only_unmatched_messages(
    spark: SparkSession, server: ServerProcess, tmp_path: Path
) -> None:
    topic, group = unique("SparkSqlStream"), unique("SparkSqlGroup")
    run(create_topic(server.broker, topic, 1, routed_by=server.namesrv))
    send_props(server.namesrv, topic, [{"a": "1", "region": "eu"}] * 4)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run_once() -> None:
        df = stream(spark, server, topic, startingOffsets="earliest", sql=SQL, consumerGroup=group)
        run_available_now(
            df.writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )

    run_once()
    assert [r["consumer_offset"] for r in group_progress(server, group) if r["topic"] == topic] == [4]
    send_props(server.namesrv, topic, [{"a": "8", "region": "us"}, {"a": "2", "region": "us"}])
    run_once()
    rows = spark.read.parquet(str(out)).collect()
    assert [(r.offset, r.body) for r in rows] == [(4, b"m0")]
    assert [r["consumer_offset"] for r in group_progress(server, group) if r["topic"] == topic] == [6]


@pytest.mark.parametrize(
    "options, needles",
    [
        ({"sql": "a > AND b"}, ["sql:", "not an SQL92 filter expression", "column"]),
        ({"sql": "a > 1", "tags": "x"}, ["sql:", "cannot be combined with tags"]),
        ({"accessKey": "someone"}, ["secretKey: required with accessKey"]),
    ],
)
def test_bad_filter_or_key_options_fail_at_start_naming_the_option(
    spark: SparkSession,
    server: ServerProcess,
    options: dict[str, str],
    needles: list[str],
    tmp_path: Path,
) -> None:
    group = f"bad-sql-{time.monotonic_ns()}"
    spark.sparkContext.setJobGroup(group, "bad input")
    try:
        with pytest.raises(Exception) as batch:
            read_source(spark, server, "AnyTopic", **options)
    finally:
        spark.sparkContext.setJobGroup("default", "")
    assert jobs_started(spark, group) == []
    with pytest.raises(Exception) as streaming:
        to_parquet(stream(spark, server, "AnyTopic", **options), tmp_path / "out", tmp_path / "cp")
    assert not list((tmp_path / "out").glob("part-*"))
    for info in (batch, streaming):
        for needle in needles:
            assert needle in str(info.value), str(info.value)


ACL = """\
accounts:
  - accessKey: spark-admin
    secretKey: spark-admin-secret
    admin: true
  - accessKey: spark-reader
    secretKey: spark-secret
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
"""


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("spark-acl")
    (folder / "plain_acl.yml").write_text(ACL)
    proc = ServerProcess(folder / "data", "--acl-file", str(folder / "plain_acl.yml")).start()
    yield proc
    proc.stop()


async def create_signed(namesrv: str, topic: str) -> None:
    async with Admin(namesrv, credentials=("spark-admin", "spark-admin-secret")) as admin:
        await admin.create_topic(topic, 1)

        async def routed() -> bool:
            try:
                return bool((await admin.route(topic)).queue_datas)
            except MQClientError:
                return False

        await eventually(routed, what=f"a route for {topic}", interval=0.1)


def test_access_key_signs_reads_and_writes_on_an_acl_broker(
    spark: SparkSession, acl_server: ServerProcess
) -> None:
    topic = unique("SparkAcl")
    keys = {"accessKey": "spark-reader", "secretKey": "spark-secret"}
    run(create_signed(acl_server.namesrv, topic))
    send_props(acl_server.namesrv, topic, ROWS, credentials=("spark-reader", "spark-secret"))
    written = spark.createDataFrame([("m-spark", "a=1")], "body string, keys string").selectExpr(
        "cast(body as binary) as body", "keys"
    )
    writer = written.write.format("rocketmq").mode("append").option("namesrv", acl_server.namesrv)
    writer.option("topic", topic).options(**keys).save()

    rows = read_source(spark, acl_server, topic, sql=SQL, **keys)
    assert [r.body for r in rows] == [b"m0", b"m4"]
    assert len(read_source(spark, acl_server, topic, **keys)) == len(ROWS) + 1
    with pytest.raises(Exception, match="NO_PERMISSION"):
        read_source(spark, acl_server, topic)
