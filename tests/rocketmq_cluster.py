"""Real Apache RocketMQ for the tests: a name server and two master brokers run from the release jars.

``make rocketmq-jars`` resolves each generation's jars (``interop/rocketmq-java/broker-<version>/pom.xml``)
into ``.cache/rocketmq/<version>/lib``. Every process gets free loopback ports, small heaps, its data and
logs under a temp dir, and advertises 127.0.0.1 (``brokerIP1``); each is stopped by its PID.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support import RawClient, free_port, wait_listening
from tidemq.client.admin import Admin
from tidemq.remoting import jsonx
from tidemq.remoting.codes import RequestCode, ResponseCode

ROOT = Path(__file__).resolve().parent.parent
JAVA_HOME_CONF = ROOT / "interop" / "rocketmq-java" / "home"
#: The generations every real-cluster test runs against: the current 5.x line and the last 4.x broker on
#: Maven Central (4.9.8 was released as a client only).
VERSIONS = ("5.3.3", "4.9.7")
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
CLUSTER_INFO_TRIES = 20

# JDK 17 closes the JDK internals that RocketMQ 4.x (and parts of 5.x) reach into: mapped-buffer cleaning.
_JDK17_FLAGS = [
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED",
]


def lib_dir(version: str) -> Path:
    lib = ROOT / ".cache" / "rocketmq" / version / "lib"
    if not any(lib.glob("rocketmq-broker-*.jar")):
        pytest.fail(f"Apache RocketMQ {version} jars are missing from {lib}: run `make rocketmq-jars`")
    return lib


def _free_broker_port() -> int:
    """A broker listens on its port, port - 2 (the VIP channel) and port + 1 (HA): all three free. The
    probe binds with SO_REUSEADDR, as the broker's listeners do, so a port some finished connection left in
    TIME_WAIT counts as free (on a busy machine thousands are)."""
    for _ in range(2000):
        port = free_port()
        if port < 1026 or port > 65533:
            continue
        taken = False
        for other in (port - 2, port + 1):
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("127.0.0.1", other))
                except OSError:
                    taken = True
        if not taken:
            return port
    raise RuntimeError("no free port triple for a broker")


@dataclass
class JavaProcess:
    """One JVM (name server or broker), its log and its PID."""

    name: str
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self, env: dict[str, str]) -> None:
        out = open(self.log_path.with_suffix(".out"), "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        out.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        text = ""
        for path in (self.log_path.with_suffix(".out"), self.log_path):
            if path.exists():
                text += f"--- {path.name}\n" + "\n".join(
                    path.read_text(errors="replace").splitlines()[-lines:]
                )
        return text or "(no log)"

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def kill(self) -> None:
        self.stop(signal.SIGKILL)


@dataclass
class JavaBroker:
    name: str
    port: int
    store: Path
    process: JavaProcess

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class JavaCluster:
    """A name server and master brokers of one Apache RocketMQ version, all on 127.0.0.1."""

    version: str
    work: Path
    flush: str = "ASYNC_FLUSH"
    cluster_name: str = "TideCluster"
    namesrv_port: int = 0
    namesrv_process: JavaProcess | None = None
    brokers: list[JavaBroker] = field(default_factory=list)
    #: Extra broker.conf settings (``transactionCheckInterval``, ``aclEnable``...), over the defaults.
    broker_settings: dict[str, str] = field(default_factory=dict)
    #: Extra JVM system properties of every process (``-Dkey=value``).
    jvm_properties: dict[str, str] = field(default_factory=dict)
    #: ROCKETMQ_HOME (``rocketmq.home.dir``): the repo's logback-only home unless a test needs its own,
    #: e.g. with a ``conf/plain_acl.yml`` (see ``own_home``).
    home: Path = JAVA_HOME_CONF

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def major(self) -> int:
        return int(self.version.split(".", 1)[0])

    def _java(self, main: str, heap: str, log: Path, *args: str) -> list[str]:
        return [
            "java",
            f"-Xms{heap}",
            f"-Xmx{heap}",
            "-XX:MaxDirectMemorySize=512m",
            "-XX:+UseG1GC",
            *_JDK17_FLAGS,
            f"-Duser.home={self.work}",  # 5.x logs under ~/logs/rocketmqlogs
            f"-Drocketmq.home.dir={self.home}",
            f"-Dtidemq.log.file={log}",  # 4.x's logback files in JAVA_HOME_CONF write here
            "-Drocketmq.client.logUseSlf4j=true",
            *(f"-D{k}={v}" for k, v in self.jvm_properties.items()),
            "-cp",
            f"{lib_dir(self.version)}/*",
            main,
            *args,
        ]

    def _env(self) -> dict[str, str]:
        return {**os.environ, "ROCKETMQ_HOME": str(self.home)}

    def own_home(self, files: dict[str, str]) -> Path:
        """Give this cluster its own ROCKETMQ_HOME under its work dir: the repo's logback files plus
        ``files`` (relative path -> text), so nothing is ever written into the repo's home."""
        home = self.work / "home"
        for src in (JAVA_HOME_CONF / "conf").iterdir():
            dst = home / "conf" / src.name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
        for rel, text in files.items():
            (home / rel).parent.mkdir(parents=True, exist_ok=True)
            (home / rel).write_text(text)
        self.home = home
        return home

    def start(self, broker_names: tuple[str, ...] = ("broker-a", "broker-b")) -> JavaCluster:
        self.work.mkdir(parents=True, exist_ok=True)
        self.namesrv_port = free_port()
        conf = self.work / "namesrv.conf"
        conf.write_text(f"listenPort={self.namesrv_port}\n")
        log = self.work / "namesrv.log"
        self.namesrv_process = JavaProcess(
            "namesrv",
            self._java("org.apache.rocketmq.namesrv.NamesrvStartup", "256m", log, "-c", str(conf)),
            log,
        )
        self.namesrv_process.start(self._env())
        try:
            self._wait_listening(self.namesrv_process, self.namesrv_port)
            for name in broker_names:
                self.brokers.append(self._new_broker(name))
            for broker in self.brokers:
                broker.process.start(self._env())
            for broker in self.brokers:
                self._wait_listening(broker.process, broker.port)
            self.wait_registered([b.name for b in self.brokers])
        except BaseException:
            self.stop()  # a start that fails part way leaves no JVM behind
            raise
        return self

    def _new_broker(self, name: str) -> JavaBroker:
        port = _free_broker_port()
        store = self.work / name / "store"
        store.mkdir(parents=True, exist_ok=True)
        conf = self.work / name / "broker.conf"
        settings = {
            "brokerClusterName": self.cluster_name,
            "brokerName": name,
            "brokerId": "0",
            "brokerRole": "ASYNC_MASTER",
            "listenPort": str(port),
            "namesrvAddr": self.namesrv,
            "brokerIP1": "127.0.0.1",
            "storePathRootDir": str(store),
            "storePathCommitLog": str(store / "commitlog"),
            "mappedFileSizeCommitLog": str(64 * 1024 * 1024),
            "flushDiskType": self.flush,
            "autoCreateTopicEnable": "true",
            "autoCreateSubscriptionGroup": "true",
            "diskMaxUsedSpaceRatio": "95",
            "waitTimeMillsInSendQueue": "3000",
            "messageDelayLevel": "1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s",
            **self.broker_settings,
        }
        conf.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        log = self.work / name / "broker.log"
        process = JavaProcess(
            name, self._java("org.apache.rocketmq.broker.BrokerStartup", "1g", log, "-c", str(conf)), log
        )
        return JavaBroker(name, port, store, process)

    def _wait_listening(self, process: JavaProcess, port: int) -> None:
        if wait_listening(port, process.alive, START_TIMEOUT_S):
            return
        alive = process.alive()
        self.stop()
        raise AssertionError(
            f"Apache RocketMQ {self.version} {process.name} "
            f"{'did not listen on' if alive else 'exited before listening on'} {port} "
            f"within {START_TIMEOUT_S:.0f} s:\n{process.log_tail()}"
        )

    def cluster_info(self) -> dict[str, object]:
        """The Java name server encodes its broker tables without its lock, so an answer given while a
        broker registers can be a ConcurrentModificationException; that one is asked again."""

        async def ask() -> dict[str, object]:
            c = await RawClient.open(self.namesrv)
            try:
                for _ in range(CLUSTER_INFO_TRIES):
                    resp = await c.call(RequestCode.GET_BROKER_CLUSTER_INFO)
                    if "ConcurrentModificationException" not in (resp.remark or ""):
                        break
                    await asyncio.sleep(0.1)
            finally:
                c.close()
            assert resp.code == ResponseCode.SUCCESS, resp
            info: dict[str, object] = jsonx.loads(resp.body)
            return info

        return asyncio.run(ask())

    def wait_registered(self, names: list[str]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        registered: set[str] = set()
        while time.monotonic() < deadline:
            table = self.cluster_info().get("brokerAddrTable") or {}
            assert isinstance(table, dict)
            registered = set(table)
            if set(names) <= registered:
                return
            time.sleep(0.3)
        tails = "\n".join(b.process.log_tail() for b in self.brokers if b.name not in registered)
        self.stop()
        raise AssertionError(
            f"Apache RocketMQ {self.version} brokers {sorted(set(names) - registered)} did not register "
            f"within {START_TIMEOUT_S:.0f} s:\n{tails}"
        )

    def broker(self, name: str) -> JavaBroker:
        return next(b for b in self.brokers if b.name == name)

    def restart_broker(self, name: str) -> None:
        broker = self.broker(name)
        broker.process.start(self._env())
        self._wait_listening(broker.process, broker.port)
        self.wait_registered([name])

    def stop(self) -> None:
        """Kill every process: the cluster's data is thrown away with its temp dir, and a graceful stop
        costs a 5.x broker 15 s."""
        for broker in self.brokers:
            broker.process.kill()
        if self.namesrv_process is not None:
            self.namesrv_process.kill()


def java_cluster(
    version: str,
    work: Path,
    flush: str = "ASYNC_FLUSH",
    broker_settings: dict[str, str] | None = None,
    jvm_properties: dict[str, str] | None = None,
    home_files: dict[str, str] | None = None,
) -> Iterator[JavaCluster]:
    cluster = JavaCluster(
        version, work, flush, broker_settings=broker_settings or {}, jvm_properties=jvm_properties or {}
    )
    if home_files:
        cluster.own_home(home_files)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


async def create_topic(
    cluster: JavaCluster, topic: str, queues: int = 4, credentials: tuple[str, str] | None = None
) -> None:
    """On both masters, then wait until the name server routes it to both (``credentials``: an ACL
    admin account's)."""
    async with Admin(cluster.namesrv, credentials=credentials) as admin:
        created = await admin.create_topic(topic, queues)
        assert len(created) == 2, created
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                route = await admin.route(topic)
            except Exception:
                route = None
            if route is not None and len(route.brokers) == 2:
                return
            await asyncio.sleep(0.3)
    raise AssertionError(f"{topic} was not routed to both brokers")
