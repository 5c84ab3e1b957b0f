"""What runs: the brokers of each system (one per durability setting) and each system's workload variants."""

from __future__ import annotations

import importlib
import importlib.util
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from procs import Broker

#: system -> the module with its broker class and its client's produce/consume.
MODULES = {
    "redis": "redis_peer",
    "rabbitmq": "rabbitmq_peer",
    "nats": "nats_peer",
    "tidemq": "tidemq_peer",
    "tidemq-nsq": "nsq_peer",
    "rocketmq-java": "rocketmq_java_peer",
    "kafka": "kafka_peer",
}
TIDEMQ_WINDOW = 256  # send_async / PUB pipelined: requests in flight
AUTO_BATCH_WINDOW = 2048  # send_async with auto_batch: single sends in flight, gathered into batches
BATCH = 100
BATCH_WINDOW = 4  # send_batch / MPUB: batches in flight
PEER_WINDOW = 1000  # RabbitMQ unconfirmed / NATS unacknowledged publishes
PACED_BATCH = 10  # W4 tiny batches: a paced producer that fell behind sends what is due, up to this
KAFKA_WINDOW = 100_000  # produce() calls undelivered at once (librdkafka's default queue size)


@dataclass(frozen=True)
class Limits:
    w1: int  # W1 messages (and W2's backlog)
    w3: int
    rate: int  # W4 msg/s
    w4_seconds: float
    cap: float  # seconds, per producing or consuming loop
    drain: float  # seconds a consumer waits for the rest after the producer finished


@dataclass(frozen=True)
class Variant:
    workload: str
    label: str
    produce: dict[str, Any] = field(default_factory=dict)  # Spec fields for the producer child
    consume: dict[str, Any] = field(default_factory=dict)  # Spec fields for the consumer child


#: What each system needs on this machine besides tidemq's own packages.
NEEDS = {
    "redis": (["redis-server"], ["redis", "hiredis"]),
    "rabbitmq": (["/usr/lib/rabbitmq/bin/rabbitmq-server", "epmd"], ["pika"]),
    "nats": (["nats-server"], ["nats"]),
    "tidemq-nsq": ([], ["nsq"]),
    "rocketmq-java": (["java"], []),
    "kafka": (["java"], ["confluent_kafka"]),
}
#: The Java peers' jars (under the repo's git-ignored .cache) and the make target that fetches them.
JARS = {
    "rocketmq-java": (".cache/rocketmq/5.3.3/lib/rocketmq-broker-*.jar", "make rocketmq-jars"),
    "kafka": (".cache/kafka/4.1.1/lib/kafka_2.13-*.jar", "make kafka-jars"),
}
ROOT = Path(__file__).resolve().parents[2]


def missing(systems: list[str]) -> list[str]:
    """The servers and Python client modules the chosen systems need but this machine lacks."""
    lacking: list[str] = []
    for system in systems:
        programs, modules = NEEDS.get(system, ([], []))
        lacking += [p for p in programs if shutil.which(p) is None]
        lacking += [f"Python module {m}" for m in modules if importlib.util.find_spec(m) is None]
        if system in JARS and not any(ROOT.glob(JARS[system][0])):
            lacking.append(f"{system} jars ({JARS[system][1]})")
    return lacking


def brokers(systems: list[str]) -> list[Broker]:
    """The brokers to run, peers first; raises ImportError when a client library is missing."""
    out: list[Broker] = []
    for system in MODULES:
        if system not in systems:
            continue
        module: Any = importlib.import_module(MODULES[system])
        if system == "redis":
            out += [module.RedisBroker("everysec"), module.RedisBroker("always")]
        elif system == "rabbitmq":
            out.append(module.RabbitBroker())
        elif system == "nats":
            out.append(module.NatsBroker())
        elif system == "tidemq":
            out += [module.TidemqBroker("async"), module.TidemqBroker("sync")]
        elif system == "rocketmq-java":
            out += [module.JavaRocketMQBroker("async"), module.JavaRocketMQBroker("sync")]
        elif system == "kafka":
            out += [module.KafkaBroker("async"), module.KafkaBroker("sync")]
        else:
            out += [module.NsqBroker("async"), module.NsqBroker("sync")]
    return out


def _peer(w1: str, w2: str, produce: dict[str, Any], w4: str, paced: dict[str, Any]) -> list[Variant]:
    return [
        Variant("w1", w1, produce),
        Variant("w2", w2),
        Variant("w3", f"{w1} -> {w2}", produce),
        Variant("w4", w4, paced),
    ]


def go_client() -> bool:
    """Whether rocketmq-client-go's W1 rows can run (``make rocketmq-go-bench`` built the Go peer)."""
    return (ROOT / ".cache" / "rocketmq-go-bench" / "peer").exists()


def plan_for(system: str, with_go: bool = False) -> list[Variant]:
    """``with_go``: add W1 with rocketmq-client-go to the RocketMQ-protocol brokers (not in --quick)."""
    batch = {"batch": BATCH, "window": BATCH_WINDOW}
    single = {"batch": 1, "window": TIDEMQ_WINDOW}
    if system == "redis":
        paced = "single XADD (a pipeline of those due when behind)"
        return _peer("XADD pipeline 100", "XREADGROUP 32 + XACK", {"batch": BATCH}, paced, {"batch": BATCH})
    if system == "rabbitmq":
        window = {"window": PEER_WINDOW}
        w1, w2 = "publish, confirms window 1000", "prefetch 1000, multi-ack"
        return _peer(w1, w2, window, "single publishes", window)
    if system == "nats":
        window = {"window": PEER_WINDOW}
        push = {"variant": "push"}
        return [
            *_peer("publish_async window 1000", "pull fetch 100 + ack", window, "single publishes", window),
            Variant("w3", "publish_async window 1000 -> push + ack", window, push),
            Variant("w4", "single publishes -> push + ack", window, push),
        ]
    if system == "kafka":
        window = {"window": KAFKA_WINDOW}
        w1 = "produce(), acks=all, linger.ms 5"
        return _peer(w1, "consume 500 + commit async", window, "single produce() calls", window)
    if system in ("tidemq", "rocketmq-java"):  # the Java broker runs tidemq's client: the same variants
        push, lite = {"variant": "push"}, {"variant": "lite"}
        due = {"batch": PACED_BATCH, "window": TIDEMQ_WINDOW}
        auto = {"options": {"auto_batch": True}}
        go = {**single, "options": {"client": "go"}}
        return [
            Variant("w1", f"send_batch {BATCH} x{BATCH_WINDOW}", batch),
            Variant("w1", f"send_async x{TIDEMQ_WINDOW}", single),
            Variant(
                "w1",
                f"send_async x{AUTO_BATCH_WINDOW}, auto_batch",
                {"batch": 1, "window": AUTO_BATCH_WINDOW, **auto},
            ),
            *([Variant("w1", f"rocketmq-client-go SendAsync x{TIDEMQ_WINDOW}", go)] if with_go else []),
            Variant("w2", "PushConsumer", consume=push),
            Variant("w2", "LitePullConsumer", consume=lite),
            Variant("w3", "send_batch -> PushConsumer", batch, push),
            Variant("w3", "send_batch -> LitePullConsumer", batch, lite),
            Variant("w4", "send_async -> PushConsumer", single, push),
            Variant("w4", "send_async, auto_batch -> PushConsumer", {**single, **auto}, push),
            Variant("w4", f"send_batch of those due (<= {PACED_BATCH}) -> PushConsumer", due, push),
            Variant("w4", "send_async -> LitePullConsumer", single, lite),
        ]
    tidemq_client, pynsq = {"options": {"client": "tidemq"}}, {"options": {"client": "pynsq"}}
    return [
        Variant("w1", f"tidemq client PUB x{TIDEMQ_WINDOW}", {**single, **tidemq_client}),
        Variant("w1", f"tidemq client MPUB {BATCH} x{BATCH_WINDOW}", {**batch, **tidemq_client}),
        Variant("w1", f"pynsq PUB x{TIDEMQ_WINDOW}", {**single, **pynsq}),
        Variant("w1", f"pynsq MPUB {BATCH} x{BATCH_WINDOW}", {**batch, **pynsq}),
        Variant("w2", "tidemq client Consumer", consume=tidemq_client),
        Variant("w2", "pynsq Reader", consume=pynsq),
        Variant("w3", "tidemq client MPUB -> Consumer", {**batch, **tidemq_client}, tidemq_client),
        Variant("w3", "pynsq MPUB -> Reader", {**batch, **pynsq}, pynsq),
        Variant("w4", "tidemq client PUB -> Consumer", {**single, **tidemq_client}, tidemq_client),
        Variant("w4", "pynsq PUB -> Reader", {**single, **pynsq}, pynsq),
    ]
