"""Spark test support: one local SparkSession for the whole run, and helpers to fill topics with known data.

Test modules import the ``spark`` fixture from here; ``getOrCreate`` hands every module the same session,
so the run pays for one JVM.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from tests.support import ServerProcess
from tidemq.client import Message, MessageQueue, Producer
from tidemq.spark import local_session

STREAM_TIMEOUT_S = 240


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    work = tmp_path_factory.mktemp("spark")
    session = local_session(
        "tidemq-tests",
        "local[2]",
        **{
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.warehouse.dir": str(work / "warehouse"),
            "spark.sql.streaming.checkpointLocation": str(work / "checkpoints"),
        },
    )
    yield session
    session.stop()


@dataclass
class Published:
    queue: int
    offset: int
    msg_id: str
    body: bytes
    tags: str | None
    keys: str | None


def publish(
    server: ServerProcess,
    topic: str,
    queue: int,
    bodies: Sequence[bytes],
    *,
    tags: Sequence[str | None] | None = None,
    keys: Sequence[str | None] | None = None,
    properties: dict[str, str] | None = None,
) -> list[Published]:
    """Send ``bodies`` to one queue, one sync send each, and return where each landed."""

    async def run() -> list[Published]:
        out = []
        async with Producer("spark-test-producer", server.namesrv) as producer:
            await producer.queues_for(topic)  # an explicit queue needs the route known first
            mq = MessageQueue(topic, "broker-a", queue)
            for i, body in enumerate(bodies):
                tag = tags[i] if tags else None
                key = keys[i] if keys else None
                msg = Message(topic, body, tags=tag, keys=key, properties=dict(properties or {}))
                result = await producer.send(msg, queue=mq)
                out.append(Published(queue, result.queue_offset, result.msg_id, body, tag, key))
        return out

    return asyncio.run(run())


def publish_many(
    server: ServerProcess,
    topic: str,
    queues: int,
    per_queue: int,
    prefix: str,
    size: int = 0,
    batch: int = 64,
) -> None:
    """Fill every queue quickly with batch sends; bodies are ``prefix-queue-i`` padded to ``size``."""

    async def run() -> None:
        async with Producer("spark-test-bulk", server.namesrv) as producer:
            await producer.queues_for(topic)
            for q in range(queues):
                mq = MessageQueue(topic, "broker-a", q)
                for start in range(0, per_queue, batch):
                    msgs = [
                        Message(topic, f"{prefix}-{q}-{i}".encode().ljust(size, b"."))
                        for i in range(start, min(per_queue, start + batch))
                    ]
                    await producer.send_batch(msgs, queue=mq)

    asyncio.run(run())


def read_source(spark: SparkSession, server: ServerProcess, topic: str, **options: str) -> list[Any]:
    reader = spark.read.format("rocketmq").option("namesrv", server.namesrv).option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return sorted(reader.load().collect(), key=lambda r: (r.topic, r.queue, r.offset))


def stream(spark: SparkSession, server: ServerProcess, topic: str, /, **options: str) -> DataFrame:
    """The source as a streaming DataFrame; ``options`` may override ``namesrv`` and ``topic`` too."""
    reader = spark.readStream.format("rocketmq").option("namesrv", server.namesrv).option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def run_available_now(query: StreamingQuery) -> StreamingQuery:
    assert query.awaitTermination(STREAM_TIMEOUT_S), "the query did not finish in time"
    if query.exception() is not None:
        raise AssertionError(str(query.exception()))
    return query


def to_parquet(df: DataFrame, out: Path, checkpoint: Path) -> StreamingQuery:
    """One AvailableNow run of ``df`` into a parquet sink, to its end."""
    return run_available_now(
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def group_progress(server: ServerProcess, group: str) -> list[dict[str, Any]]:
    """``tidemq group progress`` as a user runs it, in JSON."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tidemq",
            "group",
            "progress",
            group,
            "--namesrv",
            server.namesrv,
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def jobs_started(spark: SparkSession, group: str) -> list[int]:
    return list(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


def parquet_files(path: Path) -> set[str]:
    return {p.name for p in path.glob("part-*.parquet")}
