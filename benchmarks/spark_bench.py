"""Spark benchmark: the ``rocketmq`` sink and source against a real ``tidemq server``, beside parquet.

One server (async flush) on free 127.0.0.1 ports, one local SparkSession (``local[2]``), a topic of 4
queues. Workloads, each timed from the action's start to its end:

* ``write``         ``spark.range(N)`` as 100-byte bodies written to the topic (the sink's rows/s);
* ``read topic``    the whole topic read through the source into Spark's ``noop`` sink (every column is
                    built: pulled, decoded, turned into Arrow and handed to the JVM);
* ``read parquet``  the same rows, written once to parquet beforehand, read into the ``noop`` sink.

Each timed action follows an untimed one of the same kind (a write of ``WARMUP`` rows to another topic, a
count through the source, a parquet read), so every row meets a warm JVM and warm Python workers: the
first write of a session took twice as long as the next. Every action runs under a watchdog that cancels
Spark's jobs past its time cap, so a slow machine gets a "timed out" row rather than a hang.

``--pull-batch N`` runs the server with ``--max-transfer-count N`` and reads with ``pullBatchSize`` N: a
pull then answers N records, not Java's default 32 (docs/spark.md).

Usage: ``.venv/bin/python benchmarks/spark_bench.py [--rows N] [--pull-batch N] [--quick]``
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from bench_common import MIB, Server, arg_parser, machine, md_row, with_server
from tidemq.client.admin import Admin
from tidemq.spark import local_session

TOPIC = "SparkBench"
WARMUP_TOPIC = "SparkBenchWarmup"
WARMUP = 20_000
QUEUES = 4
BODY = 100
CAP_S = 600.0


@dataclass
class Row:
    workload: str
    rows: int
    seconds: float
    timed_out: bool = False

    def cells(self) -> list[str]:
        if self.timed_out:
            return [self.workload, f"{self.rows:,}", f"> {self.seconds:.0f}", "timed out", ""]
        rate = self.rows / self.seconds
        return [
            self.workload,
            f"{self.rows:,}",
            f"{self.seconds:.1f}",
            f"{rate:,.0f}",
            f"{rate * BODY / MIB:.2f}",
        ]


def timed(spark: SparkSession, name: str, rows: int, action: Callable[[], None], cap: float) -> Row:
    watchdog = threading.Timer(cap, spark.sparkContext.cancelAllJobs)
    watchdog.start()
    started = time.perf_counter()
    try:
        action()
    except Exception as exc:
        if time.perf_counter() - started >= cap:
            return Row(name, rows, cap, timed_out=True)
        raise RuntimeError(f"{name} failed: {exc}") from exc
    finally:
        watchdog.cancel()
    return Row(name, rows, time.perf_counter() - started)


def create_topics(namesrv: str) -> None:
    async def run() -> None:
        async with Admin(namesrv) as admin:
            for topic in (TOPIC, WARMUP_TOPIC):
                await admin.create_topic(topic, QUEUES)

    asyncio.run(run())


class WideServer(Server):
    """``tidemq server`` whose pulls answer up to ``max_transfer`` records."""

    def __init__(self, flush: str, max_transfer: int) -> None:
        super().__init__(flush)
        self.max_transfer = max_transfer

    def command(self) -> list[str]:
        return [*super().command(), "--max-transfer-count", str(self.max_transfer)]


def bench(server: Server, rows: int, pull_batch: int) -> list[Row]:
    namesrv = server.namesrv
    work = Path(tempfile.mkdtemp(prefix="tidemq-spark-bench-"))
    spark = local_session("tidemq-spark-bench", "local[2]", **{"spark.sql.shuffle.partitions": "4"})
    spark.sparkContext.setLogLevel("ERROR")
    results: list[Row] = []
    try:
        create_topics(namesrv)

        def bodies(count: int) -> DataFrame:
            return spark.range(count, numPartitions=2).selectExpr(
                f"cast(lpad(cast(id as string), {BODY}, 'x') as binary) as body"
            )

        def write(frame: DataFrame, topic: str) -> None:
            frame.write.format("rocketmq").option("namesrv", namesrv).option("topic", topic).mode(
                "append"
            ).save()

        write(bodies(WARMUP), WARMUP_TOPIC)
        frame = bodies(rows)
        results.append(
            timed(
                spark,
                "write (sink, batches of 1,000)",
                rows,
                lambda: write(frame, TOPIC),
                CAP_S,
            )
        )
        source = (
            spark.read.format("rocketmq")
            .option("namesrv", namesrv)
            .option("topic", TOPIC)
            .option("pullBatchSize", str(pull_batch))
        )
        count = source.load().count()
        if count != rows:
            raise SystemExit(f"the topic holds {count:,} messages, expected {rows:,}")
        results.append(
            timed(
                spark,
                f"read topic (source, 4 queues, {pull_batch} per pull)",
                rows,
                lambda: source.load().write.format("noop").mode("overwrite").save(),
                CAP_S,
            )
        )
        parquet = work / "parquet"
        source.load().write.parquet(str(parquet))
        spark.read.parquet(str(parquet)).write.format("noop").mode("overwrite").save()
        results.append(
            timed(
                spark,
                "read parquet (same rows)",
                rows,
                lambda: spark.read.parquet(str(parquet)).write.format("noop").mode("overwrite").save(),
                CAP_S,
            )
        )
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return results


def main() -> None:
    parser = arg_parser(__doc__, quick_help="100,000 rows")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument(
        "--pull-batch", type=int, default=32, help="records per pull (the server's max transfer count)"
    )
    args = parser.parse_args()
    rows = 100_000 if args.quick else args.rows
    server = WideServer("async", args.pull_batch)
    results = with_server(server, lambda server: bench(server, rows, args.pull_batch))

    print(machine())
    print(f"{rows:,} messages of {BODY} bytes, topic of {QUEUES} queues, Spark local[2]\n")
    print(md_row(["workload", "rows", "seconds", "rows/s", "MiB/s of bodies"]))
    print("|---|---:|---:|---:|---:|")
    for row in results:
        print(md_row(row.cells()))


if __name__ == "__main__":
    main()
