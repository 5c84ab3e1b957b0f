"""nsqd's Prometheus collector: the per-topic and per-channel fields of ``/stats`` as gauges named
``nsq_topic_*`` and ``nsq_channel_*`` (docs/operations.md#metrics), read at scrape time.

The values are the ones ``/stats`` reports (nsq/nsqd/stats.py), so a dashboard built on nsqd's statsd
output or on nsq_exporter finds the same numbers under the names it expects.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from tidemq.nsq.nsqd.server import Nsqd

TOPIC_FIELDS = (
    ("depth", "Messages published to the topic and not yet handed to its channels."),
    ("message_count", "Messages published to the topic."),
    ("message_bytes", "Message bytes published to the topic."),
    ("paused", "1 while the topic is paused."),
    ("channel_count", "Channels of the topic."),
)
CHANNEL_FIELDS = (
    ("depth", "Messages queued in the channel, not yet delivered."),
    ("in_flight_count", "Messages delivered and awaiting FIN, REQ or their timeout."),
    ("deferred_count", "Messages requeued with a delay or published deferred, waiting for their time."),
    ("message_count", "Messages the channel received."),
    ("requeue_count", "Messages requeued (REQ) by clients."),
    ("timeout_count", "Messages that timed out in flight and were requeued."),
    ("client_count", "Clients subscribed to the channel."),
    ("paused", "1 while the channel (or its topic) is paused."),
)


class NsqdCollector(Collector):
    def __init__(self, nsqd: Nsqd) -> None:
        self.nsqd = nsqd

    def collect(self) -> Iterator[Metric]:
        topic_families = {
            field: GaugeMetricFamily(f"nsq_topic_{field}", doc, labels=("topic",))
            for field, doc in TOPIC_FIELDS
        }
        channel_families = {
            field: GaugeMetricFamily(f"nsq_channel_{field}", doc, labels=("topic", "channel"))
            for field, doc in CHANNEL_FIELDS
        }
        for name, topic in sorted(self.nsqd.topics.items()):
            values = {
                "depth": topic.depth,
                "message_count": topic.message_count,
                "message_bytes": topic.message_bytes,
                "paused": int(topic.paused),
                "channel_count": len(topic.channels),
            }
            for field, family in topic_families.items():
                family.add_metric([name], values[field])
            for channel_name, channel in sorted(topic.channels.items()):
                values = {
                    "depth": channel.depth,
                    "in_flight_count": len(channel.in_flight),
                    "deferred_count": len(channel.deferred),
                    "message_count": channel.stats.message_count,
                    "requeue_count": channel.stats.requeue_count,
                    "timeout_count": channel.stats.timeout_count,
                    "client_count": len(channel.clients),
                    "paused": int(channel.paused or topic.paused),
                }
                for field, family in channel_families.items():
                    family.add_metric([name, channel_name], values[field])
        yield from topic_families.values()
        yield from channel_families.values()
