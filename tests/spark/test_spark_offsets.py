"""The source's option parsing and offset planning, which decide what every micro-batch reads (no Spark)."""

from __future__ import annotations

import pytest

from tidemq.spark.offsets import (
    DataLossError,
    QueueRef,
    QueueState,
    from_json,
    latest,
    plan_batch,
    plan_stream,
    resolve,
    to_json,
)
from tidemq.spark.options import OptionError, read_options, write_options

A0, A1, B0 = QueueRef("t", "broker-a", 0), QueueRef("t", "broker-a", 1), QueueRef("t", "broker-b", 0)


def snap(**bounds: tuple[int, int]) -> dict[QueueRef, QueueState]:
    refs = {"a0": A0, "a1": A1, "b0": B0}
    return {refs[k]: QueueState("127.0.0.1:1", lo, hi) for k, (lo, hi) in bounds.items()}


def opts(**extra: str) -> object:
    return read_options({"namesrv": "127.0.0.1:9876", "topic": "t", **extra}, "batch")


def test_offsets_json_round_trip() -> None:
    offsets = {A0: 5, A1: 0, B0: 12}
    assert to_json(offsets) == {"t": {"broker-a:0": 5, "broker-a:1": 0, "broker-b:0": 12}}
    assert from_json(to_json(offsets)) == offsets
    with pytest.raises(ValueError, match="brokerName:queueId"):
        from_json({"t": {"no-queue": 1}})


def test_resolve_earliest_latest_json_and_defaults() -> None:
    s = snap(a0=(2, 10), a1=(0, 4), b0=(5, 5))
    assert resolve("startingOffsets", "earliest", s, -2) == {A0: 2, A1: 0, B0: 5}
    assert resolve("startingOffsets", "latest", s, -2) == {A0: 10, A1: 4, B0: 5}
    spec = {"t": {"broker-a:0": 7, "broker-a:1": -1}}
    assert resolve("startingOffsets", spec, s, -2) == {A0: 7, A1: 4, B0: 5}
    with pytest.raises(
        OptionError, match=r"startingOffsets: topic 't' has no queue broker-a:9 \(its queues:"
    ):
        resolve("startingOffsets", {"t": {"broker-a:9": 0}}, s, -2)


def test_plan_batch_ranges_and_data_loss() -> None:
    s = snap(a0=(2, 10), a1=(0, 0), b0=(0, 3))
    ranges = plan_batch(opts(), s)  # type: ignore[arg-type]
    assert [(r.broker, r.queue_id, r.start, r.end) for r in ranges] == [
        ("broker-a", 0, 2, 10),
        ("broker-b", 0, 0, 3),
    ]
    lossy = opts(startingOffsets='{"t": {"broker-a:0": 0}}')
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        plan_batch(lossy, s)  # type: ignore[arg-type]
    lenient = opts(startingOffsets='{"t": {"broker-a:0": 0}}', failOnDataLoss="false")
    assert plan_batch(lenient, s)[0].start == 2  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="startingOffsets: 9 for t broker-b:0 is past its ending offset 3"):
        plan_batch(opts(startingOffsets='{"t": {"broker-b:0": 9}}'), s)  # type: ignore[arg-type]


def test_latest_rate_limit_prorates_by_backlog_and_moves_every_queue() -> None:
    s = snap(a0=(0, 100), a1=(0, 10), b0=(0, 1))
    start = {A0: 0, A1: 0, B0: 0}
    assert latest(start, s, max_rows=None, target=None, fail_on_data_loss=True) == {A0: 100, A1: 10, B0: 1}
    limited = latest(start, s, max_rows=20, target=None, fail_on_data_loss=True)
    assert limited == {A0: 18, A1: 1, B0: 1}  # floor(20*100/111), floor(20*10/111), ceil of a fraction
    capped = latest(start, s, max_rows=None, target={A0: 50, A1: 10}, fail_on_data_loss=True)
    assert capped == {A0: 50, A1: 10, B0: 0}  # AvailableNow: nothing past the target; B0 was not there yet
    assert latest({A0: 100}, s, max_rows=None, target=None, fail_on_data_loss=True) == {
        A0: 100,
        A1: 10,
        B0: 1,
    }


def test_latest_and_plan_stream_on_a_reset_queue() -> None:
    s = snap(a0=(0, 3))
    with pytest.raises(DataLossError, match="reset"):
        latest({A0: 8}, s, max_rows=None, target=None, fail_on_data_loss=True)
    assert latest({A0: 8}, s, max_rows=None, target=None, fail_on_data_loss=False) == {A0: 3}
    ranges = plan_stream({A0: 8}, {A0: 3}, s, fail_on_data_loss=False)
    assert [(r.start, r.end) for r in ranges] == [(0, 3)]
    assert [(r.start, r.end) for r in plan_stream({}, {A0: 3}, s, True)] == [(0, 3)]  # a new queue from 0


@pytest.mark.parametrize(
    ("options", "mode", "needle"),
    [
        ({}, "batch", "namesrv: required"),
        ({"namesrv": "a:1;b"}, "batch", "namesrv: 'a:1;b' is not host:port"),
        ({"namesrv": "h:1"}, "batch", "topic: required"),
        ({"namesrv": "h:1", "topic": "a b"}, "batch", "topic: 'a b' is not a valid topic name"),
        (
            {"namesrv": "h:1", "topic": "t", "startingOffsets": "[1]"},
            "batch",
            "startingOffsets: the JSON must be",
        ),
        (
            {"namesrv": "h:1", "topic": "t", "startingOffsets": '{"t": {"a:0": "x"}}'},
            "batch",
            "is not an offset",
        ),
        (
            {"namesrv": "h:1", "topic": "t", "startingOffsets": '{"t": {"a:0": -3}}'},
            "batch",
            "is not an offset",
        ),
        ({"namesrv": "h:1", "topic": "t", "endingOffsets": "earliest"}, "batch", "endingOffsets: 'earliest'"),
        (
            {"namesrv": "h:1", "topic": "t", "endingOffsets": '{"t": {"a:0": -2}}'},
            "batch",
            "endingOffsets: -2",
        ),
        (
            {"namesrv": "h:1", "topic": "t", "maxOffsetsPerTrigger": "5"},
            "batch",
            "maxOffsetsPerTrigger: only",
        ),
        (
            {"namesrv": "h:1", "topic": "t", "pullBatchSize": "2000"},
            "stream",
            "pullBatchSize: 2000 is out of range",
        ),
        (
            {"namesrv": "h:1", "topic": "t", "consumerGroup": "a b"},
            "stream",
            "consumerGroup: 'a b' is not a valid group name",
        ),
    ],
)
def test_read_option_errors_name_the_option(options: dict[str, str], mode: str, needle: str) -> None:
    with pytest.raises(OptionError) as info:
        read_options(options, mode)  # type: ignore[arg-type]
    assert needle in str(info.value)


def test_read_options_defaults_and_case_insensitivity() -> None:
    batch = read_options({"NAMESRV": "h:1", "Topic": "a, b,a", "TAGS": "x||y"}, "batch")
    assert batch.topics == ("a", "b") and batch.starting == "earliest" and batch.ending == "latest"
    assert batch.tags == "x || y" and batch.tag_set == frozenset({"x", "y"})
    assert batch.fail_on_data_loss and batch.pull_batch_size == 32 and batch.consumer_group is None
    stream = read_options({"namesrv": "h:1", "topic": "a", "maxOffsetsPerTrigger": "7"}, "stream")
    assert stream.starting == "latest" and stream.max_offsets_per_trigger == 7
    sink = write_options({"namesrv": "h:1;h:2"})
    assert sink.topic is None and sink.namesrv == "h:1;h:2" and sink.batch_size == 1000
