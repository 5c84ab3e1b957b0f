"""The real Apache RocketMQ 5.3.3 proxy (the gRPC endpoint of the 5.x SDKs) for the reference tests.

``make rocketmq-proxy-jars`` resolves ``interop/rocketmq-java/proxy-5.3.3/pom.xml`` into
``.cache/rocketmq-proxy/5.3.3/lib``. The proxy runs in cluster mode (``ProxyStartup -pm cluster``) against a
:class:`tests.rocketmq_cluster.JavaCluster`'s name server, on free loopback ports, with its config, logs
(``user.home``/logs/rocketmqlogs) and files under the test's temp dir, stopped by its PID.

5.x topics carry a ``message.type`` attribute (NORMAL, FIFO, DELAY, TRANSACTION) that the proxy checks a
send against; :func:`create_typed_topic` creates one through UPDATE_AND_CREATE_TOPIC's ``attributes`` field
(``+message.type=FIFO``), which tidemq's Admin does not send (nor does the 4.9.8 DefaultMQAdminExt).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.rocketmq_cluster import JAVA_HOME_CONF, JavaCluster, JavaProcess, lib_dir
from tests.support import free_port, wait_listening
from tidemq.client import api
from tidemq.client.admin import Admin
from tidemq.remoting.codes import RequestCode
from tidemq.remoting.command import RemotingCommand

ROOT = Path(__file__).resolve().parent.parent
VERSION = "5.3.3"
START_TIMEOUT_S = 90.0
#: The 5.x topic message types, as the broker's ``message.type`` attribute spells them.
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION")


def proxy_lib() -> Path:
    lib = ROOT / ".cache" / "rocketmq-proxy" / VERSION / "lib"
    if not any(lib.glob("rocketmq-proxy-*.jar")):
        pytest.fail(
            f"the Apache RocketMQ {VERSION} proxy is missing from {lib}: run `make rocketmq-proxy-jars`"
        )
    return lib


class FilteringCluster(JavaCluster):
    """A JavaCluster whose brokers evaluate SQL92 filters (``enablePropertyFilter``), which the proxy's
    SQL subscriptions need; everything else as the base cluster."""

    def _new_broker(self, name: str):  # type: ignore[no-untyped-def]
        broker = super()._new_broker(name)
        conf = broker.store.parent / "broker.conf"
        with conf.open("a") as f:
            f.write("enablePropertyFilter=true\n")
        return broker


@dataclass
class JavaProxy:
    """One ``ProxyStartup`` JVM in cluster mode in front of ``cluster``."""

    cluster: JavaCluster
    work: Path
    grpc_port: int = 0
    remoting_port: int = 0
    process: JavaProcess | None = None
    log: Path = Path("/nonexistent")

    @property
    def endpoint(self) -> str:
        """What a 5.x SDK's ClientConfiguration takes as its endpoints."""
        return f"127.0.0.1:{self.grpc_port}"

    def start(self) -> JavaProxy:
        self.work.mkdir(parents=True, exist_ok=True)
        self.grpc_port = free_port()
        self.remoting_port = free_port()
        config = {
            "rocketMQClusterName": self.cluster.cluster_name,
            "namesrvAddr": self.cluster.namesrv,
            "proxyMode": "cluster",
            "grpcServerPort": self.grpc_port,
            "remotingListenPort": self.remoting_port,
            # Metadata caches refresh every 20 s by default: a topic created by the test is seen at once.
            "topicConfigCacheRefreshSeconds": 1,
            "subscriptionGroupConfigCacheRefreshSeconds": 1,
            "topicRouteServiceCacheRefreshSeconds": 1,
            "grpcThreadPoolNums": 8,
        }
        conf = self.work / "rmq-proxy.json"
        conf.write_text(json.dumps(config, indent=2))
        log = self.work / "logs" / "rocketmqlogs" / "proxy.log"
        argv = [
            "java",
            "-Xms256m",
            "-Xmx512m",
            "-XX:MaxDirectMemorySize=256m",
            "-XX:+UseG1GC",
            f"-Duser.home={self.work}",
            f"-Drocketmq.home.dir={JAVA_HOME_CONF}",
            "-cp",
            f"{proxy_lib()}/*",
            "org.apache.rocketmq.proxy.ProxyStartup",
            "-pc",
            str(conf),
            "-pm",
            "cluster",
            "-n",
            self.cluster.namesrv,
        ]
        self.log = log
        self.process = JavaProcess("proxy", argv, self.work / "proxy.log")
        self.process.start(self.cluster._env())
        if not wait_listening(self.grpc_port, self.process.alive, START_TIMEOUT_S):
            tail = self.log_tail()
            self.stop()
            raise AssertionError(
                f"the Apache RocketMQ {VERSION} proxy did not listen on {self.grpc_port}:\n{tail}"
            )
        return self

    def log_tail(self, lines: int = 40) -> str:
        """The JVM's stdout and the proxy's own log (under its ``user.home``)."""
        text = self.process.log_tail(lines) if self.process is not None else ""
        if self.log.exists():
            text += "\n--- proxy.log\n" + "\n".join(
                self.log.read_text(errors="replace").splitlines()[-lines:]
            )
        return text

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()


def java_proxy(
    work: Path, broker_settings: dict[str, str] | None = None
) -> Iterator[tuple[JavaCluster, JavaProxy]]:
    """A 5.3.3 name server, two masters (with ``broker_settings`` in their broker.conf) and a proxy, all
    stopped afterwards."""
    # The name server and brokers live in their own folder; the base class only lists them by name.
    lib_dir(VERSION)
    cluster = FilteringCluster(VERSION, work / "cluster", broker_settings=dict(broker_settings or {}))
    cluster.start()
    proxy = JavaProxy(cluster, work / "proxy")
    try:
        proxy.start()
        yield cluster, proxy
    finally:
        proxy.stop()
        cluster.stop()


async def create_typed_topic(namesrv: str, topic: str, message_type: str, queues: int = 4) -> list[str]:
    """Create ``topic`` on every master of the name server's cluster with the 5.x ``message.type``
    attribute, and wait until the name server routes it; returns the brokers' names."""
    if message_type not in MESSAGE_TYPES:
        raise ValueError(f"message type must be one of {MESSAGE_TYPES}, not {message_type!r}")
    async with Admin(namesrv) as admin:
        masters = await admin.cluster_masters(None)
        for addr in masters.values():
            request = api.create_topic_request(topic, queues)
            request.ext_fields["attributes"] = f"+message.type={message_type}"
            conn = await admin.instance.connection(addr)
            resp = await conn.invoke(request, 6.0)
            assert resp.code == 0, (resp.code, resp.remark)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                route = await admin.route(topic)
            except Exception:
                route = None
            if route is not None and len(route.brokers) == len(masters):
                return sorted(masters)
            await asyncio.sleep(0.3)
    raise AssertionError(f"{topic} was not routed to every master")


async def create_group(namesrv: str, group: str, fifo: bool = False, retry_max_times: int = 16) -> None:
    """Create a consumer group on every master; ``fifo`` makes it an orderly group
    (``consumeMessageOrderly``), the 5.x condition for
    delivering a FIFO topic's message groups one message at a time; a message gets ``retry_max_times``
    + 1 delivery attempts, then goes to ``%DLQ%<group>``."""
    config = {
        "groupName": group,
        "consumeEnable": True,
        "consumeFromMinEnable": True,
        "consumeBroadcastEnable": False,
        "consumeMessageOrderly": fifo,
        "retryQueueNums": 1,
        "retryMaxTimes": retry_max_times,
        "brokerId": 0,
        "whichBrokerWhenConsumeSlowly": 1,
        "notifyConsumerIdsChangedEnable": True,
    }
    async with Admin(namesrv) as admin:
        for addr in (await admin.cluster_masters(None)).values():
            request = RemotingCommand(
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(config).encode()
            )
            resp = await (await admin.instance.connection(addr)).invoke(request, 6.0)
            assert resp.code == 0, (resp.code, resp.remark)
