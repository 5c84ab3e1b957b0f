"""A streaming job on a Spark standalone cluster: a topic into Spark's parquet file sink and, as JSON
results, into another topic. Runs until stopped; the executors, in the workers' processes, reach the
brokers on their own through the name server."""

from __future__ import annotations

import argparse

from pyspark.sql import functions as F

from tidemq.spark import local_session


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--master", required=True)
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--result-topic", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--checkpoints", required=True)
    parser.add_argument("--max-per-trigger", default="40")
    args = parser.parse_args()

    spark = local_session(
        "cluster-stream",
        args.master,
        **{
            "spark.sql.shuffle.partitions": "2",
            "spark.executor.memory": "512m",
            "spark.cores.max": "2",
            "spark.task.maxFailures": "8",
        },
    )
    df = (
        spark.readStream.format("rocketmq")
        .option("namesrv", args.namesrv)
        .option("topic", args.topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", args.max_per_trigger)
        .load()
        .select("broker", "queue", "offset", "body")
    )
    to_parquet = (
        df.writeStream.format("parquet")
        .option("path", args.out)
        .option("checkpointLocation", f"{args.checkpoints}/parquet")
        .trigger(processingTime="1 second")
        .start()
    )
    where = F.concat_ws(":", "broker", "queue", "offset")
    results = df.select(
        F.to_json(F.struct(where.alias("source"), F.col("body").cast("string").alias("body"))).alias("body"),
        where.alias("keys"),
    )
    to_topic = (
        results.writeStream.format("rocketmq")
        .option("namesrv", args.namesrv)
        .option("topic", args.result_topic)
        .option("checkpointLocation", f"{args.checkpoints}/topic")
        .trigger(processingTime="1 second")
        .start()
    )
    print("queries started", flush=True)
    spark.streams.awaitAnyTermination()
    for query in (to_parquet, to_topic):
        if query.exception() is not None:
            raise SystemExit(f"query failed: {query.exception()}")


if __name__ == "__main__":
    main()
