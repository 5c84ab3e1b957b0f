"""Client settings shared by producers and consumers; defaults follow Java's ClientConfig
(docs/protocols/rocketmq-remoting.md#timers-and-defaults, docs/protocols/rocketmq-consumption.md)."""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from dataclasses import dataclass, field

from tidemq.address import DEFAULT_NAMESRV_ADDR, LOCALHOST
from tidemq.remoting.names import (
    AUTO_CREATE_TOPIC_KEY,
    DLQ_PREFIX,
    RETRY_PREFIX,
    SCHEDULE_TOPIC,
    SYSTEM_TOPIC_PREFIX,
)


def local_client_ip() -> str:
    """This host's first non-loopback IPv4 address as the resolver knows it; loopback if none.

    Only part of the client id string: nothing connects to it.
    """
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
    except OSError:
        return LOCALHOST
    for *_, sockaddr in infos:
        ip = str(sockaddr[0])
        if not ip.startswith("127."):
            return ip
    return LOCALHOST


@dataclass(slots=True)
class ClientConfig:
    namesrv_addr: str = DEFAULT_NAMESRV_ADDR
    instance_name: str = "DEFAULT"
    client_ip: str = field(default_factory=local_client_ip)
    namespace: str = ""
    unit_name: str = ""
    poll_name_server_interval_s: float = 30.0
    heartbeat_broker_interval_s: float = 30.0
    persist_consumer_offset_interval_s: float = 5.0
    call_timeout_s: float = 3.0
    #: (access key, secret key): sign every request for a broker's plain ACL (Java's AclClientRPCHook).
    credentials: tuple[str, str] | None = None

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.replace(",", ";").split(";") if a.strip()]

    @property
    def client_id(self) -> str:
        cid = f"{self.client_ip}@{self.instance_name}"
        return f"{cid}@{self.unit_name}" if self.unit_name else cid

    def with_unique_instance(self) -> ClientConfig:
        """Producers and clustering consumers replace DEFAULT by pid#nanos (Java 4.9) so two differ."""
        if self.instance_name != "DEFAULT":
            return self
        return dataclasses.replace(self, instance_name=f"{os.getpid()}#{time.monotonic_ns()}")


def wrap_namespace(namespace: str, resource: str) -> str:
    """``ns%resource`` (docs/protocols/rocketmq-messages.md#producer): not for system resources nor twice;
    retry/DLQ prefixes stay in front."""
    if (
        not namespace
        or resource.startswith(f"{namespace}%")
        or resource in (AUTO_CREATE_TOPIC_KEY, SCHEDULE_TOPIC)
    ):
        return resource
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if resource.startswith(prefix):
            inner = resource[len(prefix) :]
            return resource if inner.startswith(f"{namespace}%") else f"{prefix}{namespace}%{inner}"
    if resource.startswith(SYSTEM_TOPIC_PREFIX) or resource.startswith("CID_RMQ_SYS_"):
        return resource
    return f"{namespace}%{resource}"


def strip_namespace(namespace: str, resource: str) -> str:
    if not namespace:
        return resource
    for prefix in (RETRY_PREFIX, DLQ_PREFIX, ""):
        if resource.startswith(f"{prefix}{namespace}%"):
            return prefix + resource[len(prefix) + len(namespace) + 1 :]
    return resource
