"""Apache Kafka 4.1.1 in KRaft mode (one node, broker + controller in one JVM) from the Maven Central
jars (``benchmarks/peers/kafka/pom.xml``, ``make kafka-jars`` -> ``.cache/kafka/4.1.1/lib``), with
confluent-kafka (librdkafka) clients.

The storage is formatted once per broker with a generated cluster id (``kafka.tools.StorageTool format``)
and the node started with ``kafka.Kafka server.properties``; its log dirs live in the broker's temp dir.
Durability: the async class is Kafka's default (no fsync per message, the OS flushes); the sync class sets
``flush.messages=1`` on each benchmark topic (an fsync per appended batch before the acknowledgement).

Producer: single ``produce()`` calls, acks=all, the client batching them (``linger.ms`` 5, librdkafka's
default) with at most ``spec.window`` undelivered; delivery reports served by a ``poll(0)`` loop.
Consumer: one consumer of a group (earliest offset), ``consume(500, timeout=0)`` (what is fetched already)
or else ``poll(timeout)`` for the next one, ``commit(asynchronous=True)`` every ``COMMIT_EVERY`` messages,
auto commit off.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import subprocess
import time
import uuid
from importlib.metadata import version as dist_version
from pathlib import Path
from typing import Any

import confluent_kafka
from clientlib import Flow, Spec, Tally, pump, ready
from confluent_kafka.admin import AdminClient, NewTopic
from procs import Broker, port_open

from bench_common import free_port

VERSION = "4.1.1"
LIB = Path(__file__).resolve().parents[2] / ".cache" / "kafka" / VERSION / "lib"
PARTITIONS = 4
LINGER_MS = 5
CONSUME_BATCH = 500
COMMIT_EVERY = 1000
READY_TIMEOUT = 30.0
HEAP = "1g"


def cluster_id() -> str:
    """A Kafka Uuid as ``kafka-storage random-uuid`` prints it: 16 random bytes, URL-safe base64."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class KafkaBroker(Broker):
    system = "kafka"
    start_timeout = 90.0

    def __init__(self, flush: str) -> None:
        super().__init__(f"kafka {flush}")
        self.durability = flush
        self.controller_port = free_port()
        self.properties = self.workdir / "server.properties"
        self.formatted = False

    def java(self, main: str, *args: str) -> list[str]:
        return [
            "java", f"-Xms{HEAP}", f"-Xmx{HEAP}", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={self.workdir}", "-cp", f"{LIB}/*", main, *args,
        ]  # fmt: skip

    def before_start(self) -> None:
        """Write the node's properties and, on the first start only, format its log dir."""
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.workdir / "data"),
            "num.partitions": str(PARTITIONS),
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        self.properties.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        if self.formatted:
            return
        fmt = self.java("kafka.tools.StorageTool", "format", "-t", cluster_id(), "-c", str(self.properties))
        done = subprocess.run(fmt, capture_output=True, text=True, timeout=120, cwd=self.workdir)
        if done.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed: {(done.stdout + done.stderr)[-1500:]}")
        self.formatted = True

    def command(self) -> list[str]:
        return self.java("kafka.Kafka", str(self.properties))

    def ready(self) -> bool:
        if not port_open(self.port):
            return False
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{self.port}"})
        return bool(admin.list_topics(timeout=2).brokers)

    def target(self) -> dict[str, Any]:
        topic = {"flush.messages": "1"} if self.durability == "sync" else {}
        return {"bootstrap": f"127.0.0.1:{self.port}", "topic_config": topic}

    def settings(self) -> str:
        flush = "`flush.messages=1` on each topic" if self.durability == "sync" else "default flush policy"
        client, librdkafka = dist_version("confluent-kafka"), confluent_kafka.libversion()[0]
        return (
            f"{self.label}: Apache Kafka {VERSION} (kafka_2.13 jars from Maven Central), KRaft, one node "
            f"(broker + controller), JDK 17, heap {HEAP}, {PARTITIONS} partitions per topic, {flush}; "
            f"confluent-kafka {client} (librdkafka {librdkafka}):"
            f" single produce() calls, acks=all, linger.ms {LINGER_MS}, the client batching; consumer group,"
            f" consume({CONSUME_BATCH}, timeout=0) else poll(), commit async every {COMMIT_EVERY:,},"
            f" earliest offset"
        )


def _create_topic(spec: Spec) -> None:
    admin = AdminClient({"bootstrap.servers": spec.target["bootstrap"]})
    topic = NewTopic(spec.name, PARTITIONS, 1, config=dict(spec.target["topic_config"]))
    future = admin.create_topics([topic])[spec.name]
    try:
        future.result(timeout=30)
    except confluent_kafka.KafkaException as exc:
        if exc.args[0].code() != confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:
            raise


async def _produce(spec: Spec) -> dict[str, Any]:
    _create_topic(spec)
    producer = confluent_kafka.Producer({
        "bootstrap.servers": spec.target["bootstrap"], "acks": "all", "linger.ms": LINGER_MS,
        "queue.buffering.max.messages": max(spec.window, 1000),
    })  # fmt: skip
    producer.list_topics(spec.name, timeout=10)  # metadata and connection, outside the timing
    flow = Flow(spec.window)
    serving = True

    async def serve() -> None:
        """Delivery reports arrive only through poll(); this loop settles the window with them."""
        while serving or flow.in_flight:
            if not producer.poll(0):
                await asyncio.sleep(0.0005)

    def send(n: int, bodies: list[bytes]) -> None:
        def delivered(err: Any, _msg: Any) -> None:
            flow.settle(n, None if err is None else str(err))

        producer.produce(spec.name, bodies[0], on_delivery=delivered)

    server = asyncio.ensure_future(serve())
    try:
        await pump(spec, send, flow)
    finally:
        serving = False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server, 10)
        producer.flush(10)
    return flow.result()


def produce(spec: Spec) -> dict[str, Any]:
    return asyncio.run(_produce(spec))


def _next_batch(consumer: Any, timeout: float) -> list[Any]:
    """What is fetched already (up to a batch), else the first message within ``timeout``:
    ``consume(n, timeout)`` alone waits for all n or the timeout, which at 5k msg/s is 100 ms of latency
    per 500 that the broker did not cause."""
    msgs: list[Any] = consumer.consume(CONSUME_BATCH, timeout=0)
    if msgs:
        return msgs
    msg = consumer.poll(timeout)
    return [] if msg is None else [msg]


def consume(spec: Spec, tally: Tally) -> None:
    _create_topic(spec)
    assigned: list[Any] = []
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": spec.target["bootstrap"], "group.id": spec.group,
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
    })  # fmt: skip
    try:
        consumer.subscribe([spec.name], on_assign=lambda _c, parts: assigned.extend(parts))
        deadline = time.monotonic() + READY_TIMEOUT
        while len(assigned) < PARTITIONS:
            if time.monotonic() >= deadline:
                raise RuntimeError(f"consumer owns {len(assigned)} of {PARTITIONS} partitions")
            for msg in consumer.consume(CONSUME_BATCH, timeout=0.1):  # nothing is produced yet
                if msg.error() is None:
                    tally.record(msg.value())
        ready()
        since_commit = 0
        while not tally.done():
            for msg in _next_batch(consumer, tally.remaining(0.2)):
                if msg.error() is None:
                    tally.record(msg.value())
                    since_commit += 1
            if since_commit >= COMMIT_EVERY:
                consumer.commit(asynchronous=True)
                since_commit = 0
        with contextlib.suppress(confluent_kafka.KafkaException):
            consumer.commit(asynchronous=False)
        tally.finish()
    finally:
        consumer.close()
