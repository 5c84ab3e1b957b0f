"""Name-server tables (Java RouteInfoManager): topic -> queue data, broker -> addresses, live brokers."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from tidemq.remoting.route import MASTER_ID, BrokerData, QueueData

log = logging.getLogger(__name__)


@dataclass(slots=True)
class BrokerLive:
    last_update: float
    data_version: dict[str, Any]
    ha_server_addr: str
    connection: object | None


@dataclass(slots=True)
class TopicDefinition:
    """One topic as a broker registers it."""

    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


class RouteInfo:
    def __init__(self, broker_expiry_s: float = 120.0) -> None:
        self.broker_expiry_s = broker_expiry_s
        self.topic_queues: dict[str, dict[str, QueueData]] = {}
        self.brokers: dict[str, BrokerData] = {}
        self.clusters: dict[str, set[str]] = {}
        self.live: dict[str, BrokerLive] = {}

    def register(
        self,
        cluster: str,
        addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        data_version: dict[str, Any],
        topics: list[TopicDefinition],
        connection: object | None,
    ) -> str | None:
        """Register or refresh a broker; returns the master address for a slave (None otherwise)."""
        self.clusters.setdefault(cluster, set()).add(broker_name)
        data = self.brokers.get(broker_name)
        first = data is None
        if data is None:
            data = self.brokers[broker_name] = BrokerData(cluster, broker_name)
        for other_id in [i for i, a in data.addrs.items() if a == addr and i != broker_id]:
            del data.addrs[other_id]
        first = first or data.addrs.get(broker_id) != addr
        data.addrs[broker_id] = addr
        previous = self.live.get(addr)
        changed = first or previous is None or previous.data_version != data_version
        self.live[addr] = BrokerLive(time.monotonic(), data_version, ha_server_addr, connection)
        if broker_id == MASTER_ID and changed:
            for topic in topics:
                self.topic_queues.setdefault(topic.name, {})[broker_name] = QueueData(
                    broker_name,
                    topic.read_queue_nums,
                    topic.write_queue_nums,
                    topic.perm,
                    topic.topic_sys_flag,
                )
        if previous is None:
            log.info("broker registered: %s id=%d at %s (cluster %s)", broker_name, broker_id, addr, cluster)
        if broker_id != MASTER_ID:
            master = data.addrs.get(MASTER_ID)
            if master and master in self.live:
                return master
        return None

    def unregister(self, cluster: str, addr: str, broker_name: str, broker_id: int) -> None:
        self.live.pop(addr, None)
        data = self.brokers.get(broker_name)
        if data is not None and data.addrs.get(broker_id) == addr:
            del data.addrs[broker_id]
            log.info("broker unregistered: %s id=%d at %s", broker_name, broker_id, addr)
            if not data.addrs:
                self._forget_broker_name(broker_name)

    def _forget_broker_name(self, broker_name: str) -> None:
        data = self.brokers.pop(broker_name, None)
        if data is not None:
            names = self.clusters.get(data.cluster)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self.clusters[data.cluster]
        for topic in list(self.topic_queues):
            queues = self.topic_queues[topic]
            queues.pop(broker_name, None)
            if not queues:
                del self.topic_queues[topic]

    def remove_addr(self, addr: str) -> None:
        self.live.pop(addr, None)
        for name, data in list(self.brokers.items()):
            for broker_id in [i for i, a in data.addrs.items() if a == addr]:
                del data.addrs[broker_id]
                log.info("broker %s id=%d at %s removed", name, broker_id, addr)
            if not data.addrs:
                self._forget_broker_name(name)

    def expire(self) -> list[str]:
        deadline = time.monotonic() - self.broker_expiry_s
        gone = [addr for addr, live in self.live.items() if live.last_update < deadline]
        for addr in gone:
            log.warning("broker at %s expired: no registration for %.0fs", addr, self.broker_expiry_s)
            self.remove_addr(addr)
        return gone

    def connection_closed(self, connection: object) -> None:
        for addr in [a for a, live in self.live.items() if live.connection is connection]:
            self.remove_addr(addr)

    def route(self, topic: str) -> dict[str, Any] | None:
        queues = self.topic_queues.get(topic)
        if not queues:
            return None
        broker_datas = [self.brokers[name].to_json() for name in sorted(queues) if name in self.brokers]
        return {
            "brokerDatas": broker_datas,
            "filterServerTable": {},
            "queueDatas": [queues[name].to_json() for name in sorted(queues)],
        }

    def cluster_info(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {name: data.to_json() for name, data in sorted(self.brokers.items())},
            "clusterAddrTable": {cluster: sorted(names) for cluster, names in sorted(self.clusters.items())},
        }

    def delete_topic(self, topic: str) -> bool:
        return self.topic_queues.pop(topic, None) is not None
