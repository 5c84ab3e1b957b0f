"""The Apache RocketMQ 5.3.3 Java broker (a name server + one master broker, ``flushDiskType``
ASYNC_FLUSH or SYNC_FLUSH), driven by tidemq's own Python client: the producers and consumers are
``tidemq_peer``'s, pointed at the Java name server, so a row differs from tidemq's only in the broker.

The JVMs are launched by ``tests/rocketmq_cluster.py`` (the harness of the java_broker tests: jars from
``make rocketmq-jars``, free ports, ``brokerIP1=127.0.0.1``, data under this broker's temp dir, each
process stopped by its PID), so the benchmark and the tests run the broker the same way.
"""

from __future__ import annotations

from typing import Any

from procs import Broker
from tests.rocketmq_cluster import JavaCluster  # run.py puts the repo root on sys.path
from tidemq_peer import PULL_BATCH, QUEUES, consume, produce

__all__ = ["VERSION", "JavaRocketMQBroker", "consume", "produce"]

VERSION = "5.3.3"
BROKER = "broker-a"
FLUSH = {"async": "ASYNC_FLUSH", "sync": "SYNC_FLUSH"}


class JavaRocketMQBroker(Broker):
    """``JavaCluster`` behind the ``Broker`` interface: roots are the name server's and broker's PIDs.

    Each start is a new ``JavaCluster`` on the same work dir, so a later run starts on the store of the
    earlier ones, as tidemq's does."""

    system = "rocketmq-java"
    start_timeout = 90.0

    def __init__(self, flush: str) -> None:
        super().__init__(f"rocketmq-java {flush}")
        self.durability = flush
        self.cluster: JavaCluster | None = None

    def start(self) -> None:
        self.cluster = JavaCluster(VERSION, self.workdir / "cluster", FLUSH[self.durability])
        self.cluster.start((BROKER,))

    def _processes(self) -> list[Any]:
        if self.cluster is None:
            return []
        found = [self.cluster.namesrv_process, *(b.process for b in self.cluster.brokers)]
        return [p for p in found if p is not None and p.alive()]

    def roots(self) -> list[int]:
        return [p.proc.pid for p in self._processes()]

    def alive(self) -> bool:
        return len(self._processes()) == 2

    def stop(self, timeout: float = 20.0) -> None:
        if self.cluster is not None:
            self.cluster.stop()  # SIGKILL by PID (a graceful 5.x stop takes 15 s); the next start recovers
        self.cluster = None

    def log_tail(self, chars: int = 2000) -> str:
        if self.cluster is None or not self.cluster.brokers:
            return "(not started)"
        return self.cluster.brokers[0].process.log_tail()[-chars:]

    def target(self) -> dict[str, Any]:
        assert self.cluster is not None
        return {"namesrv": self.cluster.namesrv}

    def settings(self) -> str:
        return (
            f"{self.label}: Apache RocketMQ {VERSION} name server + one broker (JVMs of "
            f"tests/rocketmq_cluster.py: JDK 17, G1, broker heap 1 GiB, name server 256 MiB, "
            f"`flushDiskType={FLUSH[self.durability]}`, ASYNC_MASTER, brokerIP1=127.0.0.1, 64 MiB commit "
            f"log files), {QUEUES} queues per topic; driven by tidemq's Python client exactly as tidemq's "
            f"rows (same send_batch/send_async windows, PushConsumer, LitePullConsumer pull batch "
            f"{PULL_BATCH})"
        )
