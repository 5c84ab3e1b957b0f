"""The store's Prometheus collector: log size, disk use, fsync latency, recovery time (docs/operations.md).

Read at scrape time from the store's own fields; nothing here runs between scrapes.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from tidemq.histogram import LatencyHistogram
from tidemq.store.message_store import MessageStore


def histogram_family(name: str, documentation: str, histogram: LatencyHistogram) -> HistogramMetricFamily:
    """A histogram kept by :class:`LatencyHistogram`, in Prometheus's shape."""
    return HistogramMetricFamily(
        name, documentation, buckets=histogram.cumulative(), sum_value=histogram.total
    )


class StoreCollector(Collector):
    def __init__(self, store: MessageStore) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        store = self.store
        log = store.commitlog
        yield GaugeMetricFamily(
            "rocketmq_commitlog_size_bytes",
            "Bytes of the commit log kept on disk (its max offset minus its min offset).",
            value=log.max_offset - log.min_offset,
        )
        yield GaugeMetricFamily(
            "rocketmq_commitlog_max_offset_bytes",
            "The commit log's end: bytes ever written to it.",
            value=log.max_offset,
        )
        yield CounterMetricFamily(
            "rocketmq_commitlog_flushed_bytes",
            "How far the commit log is fsynced (a physical offset).",
            value=log.flushed,
        )
        yield GaugeMetricFamily(
            "rocketmq_disk_used_ratio",
            "Used fraction of the data directory's file system (sends are refused past the full ratio).",
            value=store.disk.used_ratio,
        )
        yield GaugeMetricFamily(
            "rocketmq_disk_full",
            "1 while the store refuses writes because the disk is full.",
            value=1.0 if store.disk.full else 0.0,
        )
        yield histogram_family(
            "rocketmq_flush_latency_seconds",
            "How long one fsync of the commit log's dirty segments took.",
            store.flusher.latency,
        )
        yield GaugeMetricFamily(
            "rocketmq_store_recovery_seconds",
            "How long the store's start-up recovery took.",
            value=store.recovery_seconds,
        )
