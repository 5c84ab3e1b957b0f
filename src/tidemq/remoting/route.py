"""Topic-route wire types (docs/protocols/rocketmq-remoting.md#name-server), shared by the name server that
builds routes and the clients that read them; the JSON names are Java's QueueData and BrokerData fields."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MASTER_ID = 0

#: Permission bits of a topic's queues (Java PermName), as ``QueueData.perm`` and a broker's topic
#: config carry them: readable, writable, and inherited by topics auto-created from a template.
PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1


@dataclass(slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> QueueData:
        return cls(
            str(data["brokerName"]),
            int(data.get("readQueueNums", 0)),
            int(data.get("writeQueueNums", 0)),
            int(data.get("perm", 6)),
            int(data.get("topicSysFlag", 0)),
        )


@dataclass(slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    addrs: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        # Quoted numeric keys: every client (Java, Go, ali-ons) accepts them
        # (docs/protocols/rocketmq-remoting.md#fastjson).
        return {
            "brokerAddrs": {str(k): v for k, v in sorted(self.addrs.items())},
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BrokerData:
        """Accepts Java's standard and fastjson forms (quoted or bare numeric ``brokerAddrs`` keys)."""
        addrs = {int(k): str(v) for k, v in (data.get("brokerAddrs") or {}).items()}
        return cls(str(data.get("cluster", "")), str(data["brokerName"]), addrs)
