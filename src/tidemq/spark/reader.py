"""Spark's batch and streaming readers: planning on the driver, pulling on the executors.

Planning (``partitions``, ``latestOffset``, ``commit``) runs in Spark's Python planner and stream-runner
processes on the driver; ``read`` runs in executor workers, which get the reader by pickle. The readers
therefore hold options and plain data only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from tidemq.spark import cluster, offsets
from tidemq.spark.offsets import QueueRange, QueueRef
from tidemq.spark.options import EARLIEST, ReadOptions
from tidemq.spark.pull import read_range

log = logging.getLogger(__name__)


class RangePartition(InputPartition):
    """One Spark input partition: a queue's offset range."""

    def __init__(self, rng: QueueRange) -> None:
        super().__init__(rng)
        self.rng = rng


def _read(partition: InputPartition, opts: ReadOptions) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, RangePartition):
        return iter(())
    return read_range(partition.rng, opts)


class BatchReader(DataSourceReader):
    """A batch read: the offset ranges are fixed when the query is planned."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        snap = cluster.snapshot(opts.namesrv, opts.topics, credentials=opts.credentials)
        self.ranges = offsets.plan_batch(opts, snap)
        log.info(
            "rocketmq source: %d offsets in %d queue ranges of %s",
            sum(r.end - r.start for r in self.ranges),
            len(self.ranges),
            ",".join(opts.topics),
        )

    def partitions(self) -> Sequence[InputPartition]:
        return [RangePartition(r) for r in self.ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.opts)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A micro-batch stream; offsets are ``{"topic": {"broker:queue": offset}}`` in Spark's checkpoint.

    With ``consumerGroup`` set, the offsets of every finished micro-batch go to the brokers: in
    ``commit`` and, because Spark commits a batch to its sources only when it plans the next one, also
    in ``latestOffset``, whose ``start`` is the end of the last finished batch (so the last batch of an
    ``availableNow`` run shows too).
    """

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._cluster: cluster.Cluster | None = None
        self._target: dict[QueueRef, int] | None = None
        self._reported: dict[str, dict[str, int]] | None = None
        self._addrs: dict[QueueRef, str] = {}
        self._committed: dict[QueueRef, int] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cluster"] = None
        return state

    def _snapshot(self, want_min: bool = True) -> offsets.Snapshot:
        if self._cluster is None:
            self._cluster = cluster.Cluster(self.opts.namesrv, self.opts.credentials)
        snap = self._cluster.snapshot(self.opts.topics, want_min=want_min)
        self._addrs.update({ref: state.addr for ref, state in snap.items()})
        return snap

    def initialOffset(self) -> dict[str, Any]:
        start = offsets.resolve("startingOffsets", self.opts.starting, self._snapshot(), EARLIEST)
        return offsets.to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {ref: state.max_offset for ref, state in self._snapshot(want_min=False).items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        first = offsets.from_json(start)
        self._commit_group(first)
        snap = self._snapshot(want_min=False)
        self._reported = offsets.to_json({ref: state.max_offset for ref, state in snap.items()})
        end = offsets.latest(
            first,
            snap,
            max_rows=limit.max_rows if isinstance(limit, ReadMaxRows) else None,
            target=self._target,
            fail_on_data_loss=self.opts.fail_on_data_loss,
        )
        return offsets.to_json(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._reported

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        first, last = offsets.from_json(start), offsets.from_json(end)
        if first == last:
            return []
        ranges = offsets.plan_stream(first, last, self._snapshot(), self.opts.fail_on_data_loss)
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.opts)

    def commit(self, end: dict[str, Any]) -> None:
        self._commit_group(offsets.from_json(end))

    def _commit_group(self, done: dict[QueueRef, int]) -> None:
        group = self.opts.consumer_group
        if group is None or not done or done == self._committed:
            return
        if self._cluster is None or any(ref not in self._addrs for ref in done):
            self._snapshot(want_min=False)
        assert self._cluster is not None
        try:
            self._cluster.commit_offsets(group, done, self._addrs)
        except cluster.BrokerUnavailableError as exc:
            log.warning("rocketmq source: offsets of consumer group %s not committed: %s", group, exc)
            return
        self._committed = dict(done)

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
