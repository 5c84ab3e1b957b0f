"""Topic route data from a name server, and the queue lists producers and consumers derive from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tidemq.client.message_queue import MessageQueue
from tidemq.remoting.route import MASTER_ID, PERM_READ, PERM_WRITE, BrokerData, QueueData


@dataclass(slots=True)
class TopicRoute:
    queue_datas: list[QueueData]
    brokers: dict[str, BrokerData]
    order_topic_conf: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TopicRoute:
        queues = [QueueData.from_json(q) for q in data.get("queueDatas") or []]
        brokers = {b.broker_name: b for b in map(BrokerData.from_json, data.get("brokerDatas") or [])}
        return cls(queues, brokers, data.get("orderTopicConf"))

    def publish_queues(self, topic: str) -> list[MessageQueue]:
        """Writable queues of brokers that have a master, sorted by broker name
        (docs/protocols/rocketmq-messages.md#producer)."""
        if self.order_topic_conf:
            out = []
            for item in self.order_topic_conf.split(";"):
                name, _, count = item.partition(":")
                out += [MessageQueue(topic, name, i) for i in range(int(count or 0))]
            return out
        out = []
        for q in sorted(self.queue_datas, key=lambda q: q.broker_name):
            broker = self.brokers.get(q.broker_name)
            if q.perm & PERM_WRITE and broker is not None and MASTER_ID in broker.addrs:
                out += [MessageQueue(topic, q.broker_name, i) for i in range(q.write_queue_nums)]
        return out

    def subscribe_queues(self, topic: str) -> list[MessageQueue]:
        out = [
            MessageQueue(topic, q.broker_name, i)
            for q in self.queue_datas
            if q.perm & PERM_READ
            for i in range(q.read_queue_nums)
        ]
        return sorted(out)
