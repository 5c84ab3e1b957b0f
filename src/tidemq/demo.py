"""``make quickstart``: an e-commerce order stream through ``tidemq server``, a push consumer and Spark.

Run as ``python -m tidemq.demo``. It starts ``tidemq server`` on free ports and publishes an hour of order
events (JSON: order id, user, category, amount, event time) to the topic ``orders`` while

* a push-consumer group, ``large-order-alerts``, flags every order of 400 or more as it arrives, and
* two Structured Streaming queries read ``orders`` with ``format("rocketmq")``, parse the JSON and sum
  orders and revenue per category over 5-minute event-time windows with a 2-minute watermark: one writes
  the closed windows to parquet, the other publishes them to the topic ``order-stats``.

It then checks every output against the input, prints a summary, stops everything and exits 0 (1 when a
check fails). Everything it writes goes under ``var/quickstart/``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from tidemq.address import LOCALHOST
from tidemq.client import BlockingProducer, BlockingPushConsumer, ConsumeFromWhere, ConsumeStatus, Message
from tidemq.client.admin import Admin
from tidemq.record import MessageExt

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

OUT_DIR = Path("var/quickstart")
ORDERS, STATS = "orders", "order-stats"
EVENTS = 12_000
BATCH = 50
PUBLISH_SECONDS = 20.0
LARGE_ORDER = 400.0
CATEGORIES = ("books", "electronics", "garden", "games", "kitchen")
START = dt.datetime(2024, 11, 29, 10, 0, tzinfo=dt.UTC)
SPAN = dt.timedelta(hours=1)
WINDOW = dt.timedelta(minutes=5)
WATERMARK = dt.timedelta(minutes=2)
WAIT_S = 180.0
LOG4J = """rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: %m%n
"""


@dataclass(frozen=True, slots=True)
class Order:
    order_id: str
    user: str
    category: str
    amount: float
    event_time: dt.datetime

    def message(self) -> Message:
        body = orjson.dumps(
            {
                "order_id": self.order_id,
                "user": self.user,
                "category": self.category,
                "amount": self.amount,
                "event_time": self.event_time.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            }
        )
        return Message(ORDERS, body, tags=self.category, keys=self.order_id)


def generate_orders(n: int = EVENTS, seed: int = 7) -> list[Order]:
    """An hour of orders in arrival order; 3 % arrive up to 100 s late, 2 % are large."""
    rng = random.Random(seed)
    orders = []
    for i in range(n):
        at = START + SPAN * (i / n)
        if rng.random() < 0.03:
            at -= dt.timedelta(seconds=rng.uniform(5, 100))
        big = rng.random() < 0.02
        amount = round(rng.uniform(LARGE_ORDER, 2000) if big else rng.uniform(5, 150), 2)
        orders.append(Order(f"o-{i:06d}", f"u-{rng.randrange(2000):04d}", rng.choice(CATEGORIES), amount, at))
    return orders


def expected_windows(orders: list[Order]) -> dict[tuple[dt.datetime, str], tuple[int, float]]:
    """(window start, category) -> (orders, revenue) for the windows the watermark has closed."""
    watermark = max(o.event_time for o in orders) - WATERMARK
    out: dict[tuple[dt.datetime, str], tuple[int, float]] = {}
    for o in orders:
        start = START + WINDOW * ((o.event_time - START) // WINDOW)
        if start + WINDOW <= watermark:
            count, revenue = out.get((start, o.category), (0, 0.0))
            out[(start, o.category)] = (count + 1, revenue + o.amount)
    return out


# --- the server -----------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOCALHOST, 0))
        return int(s.getsockname()[1])


def start_server(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    ns_port, broker_port = _free_port(), _free_port()
    args = [sys.executable, "-m", "tidemq", "server", "--data-dir", str(data_dir)]
    args += ["--namesrv-port", str(ns_port), "--broker-port", str(broker_port)]
    args += ["--no-nsq", "--no-lookupd", "--no-grpc", "--no-http"]
    with open(OUT_DIR / "server.log", "wb") as log:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log)
    assert proc.stdout is not None
    if not proc.stdout.readline().decode().startswith("tidemq ready"):
        proc.kill()
        raise SystemExit(f"server failed to start; see {OUT_DIR / 'server.log'}")
    return proc, f"{LOCALHOST}:{ns_port}"


def stop_server(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(30)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        return proc.wait(10)


def create_topics(namesrv: str) -> None:
    async def run() -> None:
        async with Admin(namesrv) as admin:
            await admin.create_topic(ORDERS, 4)
            await admin.create_topic(STATS, 2)

    asyncio.run(run())


# --- the push consumer and the publisher ----------------------------------------------------------------


@dataclass
class AlertDesk:
    """The ``large-order-alerts`` group: reacts to single events as they arrive."""

    path: Path
    seen: set[str] = field(default_factory=set)
    alerts: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on_messages(self, msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        with self.lock, open(self.path, "ab") as out:
            for msg in msgs:
                order = orjson.loads(msg.body)
                self.seen.add(order["order_id"])
                if order["amount"] >= LARGE_ORDER and order["order_id"] not in self.alerts:
                    self.alerts[order["order_id"]] = order["amount"]
                    out.write(orjson.dumps({"alert": "large order", **order}) + b"\n")
        return ConsumeStatus.CONSUME_SUCCESS


def publish(namesrv: str, orders: list[Order], errors: list[BaseException]) -> None:
    """Publish in batches, paced over PUBLISH_SECONDS, as a live order service would."""
    try:
        with BlockingProducer("order-service", namesrv) as producer:
            started = time.monotonic()
            for i in range(0, len(orders), BATCH):
                producer.send_batch([o.message() for o in orders[i : i + BATCH]])
                ahead = started + PUBLISH_SECONDS * (i + BATCH) / len(orders) - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
    except BaseException as exc:
        errors.append(exc)


# --- Spark ----------------------------------------------------------------------------------------------


def spark_session() -> SparkSession:
    """A local session whose JVM logs go to var/quickstart/spark.log rather than the terminal."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise SystemExit("Spark needs Java 17 or newer: apt-get install openjdk-17-jre-headless")
    conf = OUT_DIR / "spark-conf"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "log4j2.properties").write_text(LOG4J.format(path=(OUT_DIR / "spark.log").resolve()))
    os.environ["SPARK_CONF_DIR"] = str(conf.resolve())
    from tidemq.spark import local_session

    return local_session("tidemq-quickstart", "local[2]", **{"spark.sql.shuffle.partitions": "2"})


def window_stats(spark: SparkSession, namesrv: str) -> DataFrame:
    from pyspark.sql import functions as F

    orders = (
        spark.readStream.format("rocketmq")
        .option("namesrv", namesrv)
        .option("topic", ORDERS)
        .option("startingOffsets", "earliest")
        .load()
    )
    schema = "order_id string, user string, category string, amount double, event_time timestamp"
    parsed = orders.select(F.from_json(F.col("body").cast("string"), schema).alias("o")).select("o.*")
    return (
        parsed.withWatermark("event_time", "2 minutes")
        .groupBy(F.window("event_time", "5 minutes"), "category")
        .agg(F.count("*").alias("orders"), F.sum("amount").alias("revenue"), F.max("amount").alias("largest"))
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "category",
            "orders",
            F.round("revenue", 2).alias("revenue"),
            "largest",
        )
    )


def start_queries(spark: SparkSession, namesrv: str) -> list[StreamingQuery]:
    from pyspark.sql import functions as F

    stats = window_stats(spark, namesrv)
    to_parquet = (
        stats.writeStream.format("parquet")
        .option("path", str(OUT_DIR / "output" / "category_windows"))
        .option("checkpointLocation", str(OUT_DIR / "checkpoints" / "parquet"))
        .outputMode("append")
        .trigger(processingTime="2 seconds")
        .start()
    )
    as_messages = stats.select(
        F.to_json(F.struct(*stats.columns)).alias("body"),
        F.col("category").alias("tags"),
        F.concat_ws("@", "category", F.date_format("window_start", "HH:mm")).alias("keys"),
    )
    to_topic = (
        as_messages.writeStream.format("rocketmq")
        .option("namesrv", namesrv)
        .option("topic", STATS)
        .option("checkpointLocation", str(OUT_DIR / "checkpoints" / "topic"))
        .outputMode("append")
        .trigger(processingTime="2 seconds")
        .start()
    )
    return [to_parquet, to_topic]


def drain(queries: list[StreamingQuery]) -> None:
    """Wait until both queries have processed everything published (closed windows included)."""

    def give_up() -> None:
        for query in queries:
            query.stop()

    watchdog = threading.Timer(WAIT_S, give_up)
    watchdog.start()
    try:
        for query in queries:
            query.processAllAvailable()
    finally:
        watchdog.cancel()


# --- the run --------------------------------------------------------------------------------------------


def check(spark: SparkSession, namesrv: str, orders: list[Order], desk: AlertDesk) -> list[tuple[str, str]]:
    """Compare every output with what the input says it must be; the summary rows, or SystemExit."""
    problems = []
    windows = (
        spark.read.parquet(str(OUT_DIR / "output" / "category_windows"))
        .selectExpr("unix_timestamp(window_start) as start", "category", "orders", "revenue")
        .collect()
    )
    got = {(dt.datetime.fromtimestamp(r.start, dt.UTC), r.category): (r.orders, r.revenue) for r in windows}
    want = expected_windows(orders)
    if len(windows) != len(got) or got.keys() != want.keys():
        problems.append(f"parquet holds {len(windows)} window rows, expected {len(want)}")
    wrong = [k for k in want if k in got and (got[k][0] != want[k][0] or abs(got[k][1] - want[k][1]) > 0.01)]
    if wrong:
        problems.append(f"{len(wrong)} windows disagree with the input, e.g. {wrong[0]}")
    published = spark.read.format("rocketmq").option("namesrv", namesrv).option("topic", STATS).load().count()
    if published != len(want):
        problems.append(f"{STATS} holds {published} messages, expected {len(want)}")
    large = {o.order_id for o in orders if o.amount >= LARGE_ORDER}
    if set(desk.alerts) != large:
        problems.append(f"{len(desk.alerts)} alerts raised, expected {len(large)}")
    if problems:
        raise SystemExit("quickstart check failed: " + "; ".join(problems))
    revenue = Counter[str]()
    for (_, category), (_, amount) in got.items():
        revenue[category] += amount
    top, top_revenue = revenue.most_common(1)[0]
    last_open = max(o.event_time for o in orders) - WATERMARK
    open_from = START + WINDOW * ((last_open - START) // WINDOW)
    return [
        (
            "events in",
            f"{len(orders):,} orders published to '{ORDERS}' (4 queues) over {PUBLISH_SECONDS:.0f} s",
        ),
        ("push consumer", f"'large-order-alerts' read {len(desk.seen):,} events"),
        ("alerts", f"{len(desk.alerts)} orders of {LARGE_ORDER:.0f} or more flagged as they arrived"),
        ("windows out", f"{len(windows)} (5-minute window x category), each count checked against the input"),
        ("published", f"{published} window results to '{STATS}'"),
        ("still open", f"windows from {open_from:%H:%M} (inside the 2-minute watermark)"),
        ("top category", f"{top}, {top_revenue:,.2f} in closed windows"),
        ("parquet output", str(OUT_DIR / "output" / "category_windows")),
        ("alerts file", str(OUT_DIR / "alerts.jsonl")),
        ("logs and data", f"{OUT_DIR}/server.log, {OUT_DIR}/spark.log, {OUT_DIR}/data"),
    ]


def run(namesrv: str, orders: list[Order]) -> list[tuple[str, str]]:
    create_topics(namesrv)
    desk = AlertDesk(OUT_DIR / "alerts.jsonl")
    consumer = BlockingPushConsumer(
        "large-order-alerts", namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    )
    consumer.subscribe(ORDERS, "*")
    consumer.register_listener(desk.on_messages)
    consumer.start()
    spark = None
    try:
        print("starting Spark (local[2]) ...", flush=True)
        spark = spark_session()
        queries = start_queries(spark, namesrv)
        print(f"publishing {len(orders):,} order events while the pipeline runs ...", flush=True)
        errors: list[BaseException] = []
        publisher = threading.Thread(target=publish, args=(namesrv, orders, errors), name="order-service")
        publisher.start()
        publisher.join(PUBLISH_SECONDS + WAIT_S)
        if errors or publisher.is_alive():
            raise SystemExit(f"publishing failed: {errors[0] if errors else 'timed out'}")
        drain(queries)
        for query in queries:
            query.stop()
        deadline = time.monotonic() + WAIT_S
        while len(desk.seen) < len(orders) and time.monotonic() < deadline:
            time.sleep(0.2)
        return check(spark, namesrv, orders, desk)
    finally:
        consumer.shutdown()
        if spark is not None:
            for query in spark.streams.active:
                query.stop()
            spark.stop()


def main() -> None:
    started = time.monotonic()
    if OUT_DIR.exists():
        shutil.rmtree(OUT_DIR)
    OUT_DIR.mkdir(parents=True)
    print(f"starting tidemq server (data in {OUT_DIR / 'data'}) ...", flush=True)
    proc, namesrv = start_server(OUT_DIR / "data")
    try:
        rows = run(namesrv, generate_orders())
    finally:
        code = stop_server(proc)
    if code != 0:
        raise SystemExit(f"server exited with {code}; see {OUT_DIR / 'server.log'}")
    rows += [
        ("name server", namesrv),
        ("elapsed", f"{time.monotonic() - started:.0f} s, server stopped cleanly"),
    ]
    width = max(len(k) for k, _ in rows)
    print("\ntidemq quickstart: orders -> push consumer + Spark Structured Streaming -> parquet + topic")
    for key, value in rows:
        print(f"  {key.ljust(width)}  {value}")


if __name__ == "__main__":
    main()
