"""Offset ranges: resolving starting/ending options, rate limiting and data-loss rules (no I/O).

Offsets travel through Spark's checkpoint as ``{"topic": {"brokerName:queueId": offset}}``. The range a
micro-batch reads is fixed by the two offset maps alone, so a batch replayed after a crash reads exactly
the same messages: that, and Spark's checkpoint, is where exactly-once comes from.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tidemq.spark.options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    OptionError,
    ReadOptions,
    queue_key,
    split_queue_key,
)

log = logging.getLogger(__name__)

OffsetJson = dict[str, dict[str, int]]


@dataclass(frozen=True, slots=True, order=True)
class QueueRef:
    topic: str
    broker: str
    queue_id: int

    @property
    def key(self) -> str:
        return queue_key(self.broker, self.queue_id)


@dataclass(frozen=True, slots=True)
class QueueState:
    addr: str
    min_offset: int
    max_offset: int


Snapshot = dict[QueueRef, QueueState]


class DataLossError(RuntimeError):
    """Messages a query should read are gone from the broker (retention) and failOnDataLoss is true."""


@dataclass(frozen=True, slots=True)
class QueueRange:
    """Offsets ``[start, end)`` of one queue: one Spark input partition."""

    topic: str
    broker: str
    queue_id: int
    addr: str
    start: int
    end: int


def to_json(offsets: Mapping[QueueRef, int]) -> OffsetJson:
    out: OffsetJson = {}
    for ref in sorted(offsets):
        out.setdefault(ref.topic, {})[ref.key] = int(offsets[ref])
    return out


def from_json(data: Any, what: str = "offset") -> dict[QueueRef, int]:
    """Offsets Spark hands back (from our own JSON, possibly via a checkpoint written by an older run)."""
    if not isinstance(data, dict):
        raise ValueError(f"{what}: expected an object of topics, got {type(data).__name__}")
    out: dict[QueueRef, int] = {}
    for topic, queues in data.items():
        if not isinstance(queues, dict):
            raise ValueError(f"{what}: topic {topic!r} does not map to queue offsets")
        for key, offset in queues.items():
            try:
                broker, queue = split_queue_key(str(key))
            except ValueError:
                raise ValueError(f"{what}: {key!r} is not brokerName:queueId") from None
            out[QueueRef(str(topic), broker, queue)] = int(offset)
    return out


def data_loss(fail: bool, message: str) -> None:
    """Fail with a message naming failOnDataLoss, or log that the lost messages are skipped."""
    if fail:
        raise DataLossError(
            f"{message}. Some data was lost (retention removed it, or the queue was reset). "
            "Set the source option failOnDataLoss to false to skip the lost messages instead of failing."
        )
    log.warning("%s; skipping the lost messages (failOnDataLoss is false)", message)


def resolve(option: str, spec: OffsetSpec, snap: Snapshot, default: int) -> dict[QueueRef, int]:
    """Turn ``earliest``/``latest``/JSON into one offset per queue; unknown queues are an OptionError."""
    offsets: dict[QueueRef, int] = {}
    wanted = {} if isinstance(spec, str) else spec
    if isinstance(spec, dict):
        by_topic: dict[str, set[str]] = {}
        for ref in snap:
            by_topic.setdefault(ref.topic, set()).add(ref.key)
        for topic, queues in spec.items():
            unknown = sorted(set(queues) - by_topic.get(topic, set()))
            if unknown:
                known = ", ".join(sorted(by_topic.get(topic, set()))) or "none"
                raise OptionError(
                    f"{option}: topic {topic!r} has no queue {', '.join(unknown)} (its queues: {known})"
                )
    for ref, state in snap.items():
        if spec == "earliest":
            value = EARLIEST
        elif spec == "latest":
            value = LATEST
        else:
            value = wanted.get(ref.topic, {}).get(ref.key, default)
        offsets[ref] = (
            state.min_offset if value == EARLIEST else state.max_offset if value == LATEST else value
        )
    return offsets


def plan_batch(opts: ReadOptions, snap: Snapshot) -> list[QueueRange]:
    start = resolve("startingOffsets", opts.starting, snap, EARLIEST)
    end = resolve("endingOffsets", opts.ending, snap, LATEST)
    ranges = []
    for ref, state in sorted(snap.items()):
        s, e = start[ref], end[ref]
        where = f"{ref.topic} {ref.key}"
        if e > state.max_offset:
            raise OptionError(f"endingOffsets: {e} for {where} is past the queue's end ({state.max_offset})")
        if s > e:
            raise OptionError(f"startingOffsets: {s} for {where} is past its ending offset {e}")
        if s < state.min_offset:
            data_loss(
                opts.fail_on_data_loss,
                f"{where}: offsets {s}..{state.min_offset - 1} are no longer on the broker",
            )
            s = state.min_offset
        if s < e:
            ranges.append(QueueRange(ref.topic, ref.broker, ref.queue_id, state.addr, s, e))
    return ranges


def latest(
    start: Mapping[QueueRef, int],
    snap: Snapshot,
    *,
    max_rows: int | None,
    target: Mapping[QueueRef, int] | None,
    fail_on_data_loss: bool,
) -> dict[QueueRef, int]:
    """The end offsets of the next micro-batch.

    Queues the start does not know yet (added to the topic) start at offset 0. ``target`` caps every
    queue (Trigger.AvailableNow); ``max_rows`` spreads a row budget over the queues in proportion to
    their backlog, at least one row per queue with a backlog, as Spark's Kafka source does.
    """
    end = dict(start)
    avail: dict[QueueRef, int] = {}
    for ref, state in snap.items():
        s = start.get(ref, 0)
        e = state.max_offset
        if e < s:
            data_loss(
                fail_on_data_loss, f"{ref.topic} {ref.key}: the queue ends at {e}, before {s} (it was reset)"
            )
            end[ref] = e
            continue
        if target is not None:
            e = max(s, min(e, target.get(ref, s)))
        end[ref] = s
        avail[ref] = e - s
    total = sum(avail.values())
    for ref, n in avail.items():
        take = n
        if max_rows is not None and total > max_rows and n > 0:
            share = max_rows * n / total
            take = min(n, math.ceil(share) if share < 1 else math.floor(share))
        end[ref] = start.get(ref, 0) + take
    return end


def plan_stream(
    start: Mapping[QueueRef, int], end: Mapping[QueueRef, int], snap: Snapshot, fail_on_data_loss: bool
) -> list[QueueRange]:
    ranges = []
    for ref, e in sorted(end.items()):
        s = start.get(ref, 0)
        state = snap.get(ref)
        where = f"{ref.topic} {ref.key}"
        if state is None:
            if s < e:
                data_loss(fail_on_data_loss, f"{where}: the queue is no longer in the topic's route")
            continue
        if e < s:
            data_loss(fail_on_data_loss, f"{where}: the batch ends at {e}, before its start {s}")
            s = state.min_offset
        if s < state.min_offset:
            data_loss(
                fail_on_data_loss, f"{where}: offsets {s}..{state.min_offset - 1} are no longer on the broker"
            )
            s = state.min_offset
        if s < e:
            ranges.append(QueueRange(ref.topic, ref.broker, ref.queue_id, state.addr, s, e))
    return ranges
