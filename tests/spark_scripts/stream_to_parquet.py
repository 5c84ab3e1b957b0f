"""A streaming query from a topic into Spark's parquet file sink, as its own driver process.

The killed-driver test runs it twice on one checkpoint. With ``--stall-queue/--stall-offset`` a UDF
blocks the task that reaches that message (after writing its PID to ``--marker``), so the batch is
caught mid-flight: its offsets are in the log, other tasks' files are on disk, nothing is committed.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType

from tidemq.spark import local_session


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--max-per-trigger", default="20")
    parser.add_argument("--stall-queue", type=int, default=-1)
    parser.add_argument("--stall-offset", type=int, default=-1)
    parser.add_argument("--marker", default="")
    args = parser.parse_args()

    spark = local_session("exactly-once-driver", "local[2]", **{"spark.sql.shuffle.partitions": "2"})
    df = (
        spark.readStream.format("rocketmq")
        .option("namesrv", args.namesrv)
        .option("topic", args.topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", args.max_per_trigger)
        .load()
    )
    if args.stall_queue >= 0:
        stall_queue, stall_offset, marker = args.stall_queue, args.stall_offset, args.marker

        def stall(queue: int, offset: int) -> bool:
            if queue == stall_queue and offset == stall_offset:
                Path(marker).write_text(str(os.getpid()))
                time.sleep(280)
            return True

        df = df.where(F.udf(stall, BooleanType()).asNondeterministic()("queue", "offset"))
    query = (
        df.writeStream.format("parquet")
        .option("path", args.out)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print("query finished", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
