"""The broker's Prometheus collector (``/metrics``, docs/operations.md#metrics).

Names follow the RocketMQ 5.x broker's metrics (``rocketmq_messages_in_total``,
``rocketmq_throughput_in_total``, ``rocketmq_consumer_lag_messages``, ``rocketmq_*_connections``) and
rocketmq-exporter's (``rocketmq_group_diff``, ``rocketmq_group_retrydiff``, ``rocketmq_group_dlqdiff``,
``rocketmq_consumer_tps``, ``rocketmq_producer_offset``, ``rocketmq_consumer_offset``), so dashboards
built for either read tidemq. Everything is read from live state at scrape time: the send and pull paths
only count into their latency histograms.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from tidemq.exposition import TextFamily, label_prefix
from tidemq.remoting.names import dlq_topic, retry_topic
from tidemq.store.metrics import histogram_family

if TYPE_CHECKING:
    from tidemq.broker.broker import Broker

GROUP_QUEUE_LABELS = ("cluster", "broker", "consumer_group", "topic", "queue_id")
GROUP_TOPIC_LABELS = ("cluster", "broker", "consumer_group", "topic")
GROUP_LABELS = ("cluster", "broker", "consumer_group")


class BrokerCollector(Collector):
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        yield from self._topics()
        yield from self._groups()
        yield from self._clients()
        broker = self.broker
        yield histogram_family(
            "rocketmq_send_latency_seconds",
            "Broker-side time to handle a send request (to its answer; under sync flush, to the fsync).",
            broker.send_latency,
        )
        yield histogram_family(
            "rocketmq_pull_latency_seconds",
            "Broker-side time to handle a pull request that is answered at once (held pulls excluded).",
            broker.pull_latency,
        )

    def _topics(self) -> Iterator[Metric]:
        broker = self.broker
        messages = TextFamily(
            "rocketmq_messages_in",
            "Messages ever written to the queue (its max offset).",
            "counter",
            "queue_id",
        )
        throughput = TextFamily(
            "rocketmq_throughput_in",
            "Stored record bytes written to the queue since the server started.",
            "counter",
            "queue_id",
        )
        max_offsets = TextFamily(
            "rocketmq_producer_offset", "The queue's max offset (the next message's).", "gauge", "queue_id"
        )
        min_offsets = TextFamily(
            "rocketmq_topic_min_offset", "The queue's min offset (oldest kept).", "gauge", "queue_id"
        )
        cluster, name = broker.config.cluster_name, broker.config.broker_name
        find_queue = broker.store.find_queue
        for topic, config in broker.topics.all().items():
            prefix = label_prefix(cluster=cluster, broker=name, topic=topic)
            for queue_id in range(config.write_queue_nums):
                cq = find_queue(topic, queue_id)
                if cq is None:
                    hi = lo = written = 0
                else:
                    hi, lo, written = cq.max_offset, cq.min_offset, cq.bytes_in
                queue = str(queue_id)
                messages.add(prefix, queue, hi)
                throughput.add(prefix, queue, written)
                max_offsets.add(prefix, queue, hi)
                min_offsets.add(prefix, queue, lo)
        yield from (messages, throughput, max_offsets, min_offsets)

    def _groups(self) -> Iterator[Metric]:
        broker = self.broker
        cluster, name = broker.config.cluster_name, broker.config.broker_name
        store = broker.store
        offsets = GaugeMetricFamily(
            "rocketmq_consumer_offset",
            "The group's committed offset in the queue.",
            labels=GROUP_QUEUE_LABELS,
        )
        lag = GaugeMetricFamily(
            "rocketmq_consumer_lag_messages",
            "Messages in the queue past the group's committed offset.",
            labels=GROUP_QUEUE_LABELS,
        )
        diff = GaugeMetricFamily(
            "rocketmq_group_diff",
            "The group's lag summed over the topic's queues.",
            labels=GROUP_TOPIC_LABELS,
        )
        tps = GaugeMetricFamily(
            "rocketmq_consumer_tps",
            "Messages per second the group pulled from the topic over the last minute.",
            labels=GROUP_TOPIC_LABELS,
        )
        per_group_lag: dict[str, dict[str, int]] = {}
        for key, queues in broker.consumer_offsets.table.items():
            topic, _, group = key.partition("@")
            if not group or broker.topics.get(topic) is None:
                continue
            total = 0
            for queue_id, committed in queues.items():
                behind = max(0, store.max_offset(topic, queue_id) - committed)
                labels = [cluster, name, group, topic, str(queue_id)]
                offsets.add_metric(labels, committed)
                lag.add_metric(labels, behind)
                total += behind
            per_group_lag.setdefault(group, {})[topic] = total
            diff.add_metric([cluster, name, group, topic], total)
            tps.add_metric([cluster, name, group, topic], broker.pulled.tps(topic, group))
        retry = GaugeMetricFamily(
            "rocketmq_group_retrydiff",
            "Messages of the group's retry topic not yet consumed again.",
            labels=GROUP_LABELS,
        )
        dlq = GaugeMetricFamily(
            "rocketmq_group_dlqdiff",
            "Messages in the group's dead-letter topic (%DLQ%group), kept there until resent.",
            labels=GROUP_LABELS,
        )
        groups = set(broker.groups.groups) | {g for g in per_group_lag if not g.startswith("%")}
        for group in sorted(groups):
            labels = [cluster, name, group]
            retry.add_metric(labels, per_group_lag.get(group, {}).get(retry_topic(group), 0))
            dead = dlq_topic(group)
            config = broker.topics.get(dead)
            in_dlq = 0
            if config is not None:
                for queue_id in range(config.write_queue_nums):
                    in_dlq += store.max_offset(dead, queue_id) - store.min_offset(dead, queue_id)
            dlq.add_metric(labels, in_dlq)
        yield from (offsets, lag, diff, tps, retry, dlq)

    def _clients(self) -> Iterator[Metric]:
        broker = self.broker
        cluster, name = broker.config.cluster_name, broker.config.broker_name
        clients = broker.clients
        producers = GaugeMetricFamily(
            "rocketmq_producer_connections", "Producers connected, per group.", labels=GROUP_LABELS
        )
        for group in sorted(set(clients.producers) | set(clients.front_end_producers)):
            count = len(clients.producers.get(group, ())) + len(clients.front_end_producers.get(group, ()))
            producers.add_metric([cluster, name, group], count)
        consumers = GaugeMetricFamily(
            "rocketmq_consumer_connections", "Consumers connected, per group.", labels=GROUP_LABELS
        )
        for group in sorted(set(clients.consumers) | set(clients.front_end_consumers)):
            info = clients.consumers.get(group)
            count = (len(info.channels) if info else 0) + len(clients.front_end_consumers.get(group, ()))
            consumers.add_metric([cluster, name, group], count)
        yield from (producers, consumers)
