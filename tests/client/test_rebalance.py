"""Rebalance's assignment diff: which owned queues of a topic are dropped in a round."""

from __future__ import annotations

import time

from tidemq.client.consumer.process_queue import PULL_MAX_IDLE_S, ProcessQueue
from tidemq.client.consumer.rebalance import stale_queues
from tidemq.client.message_queue import MessageQueue


def _queues(topic: str, *ids: int) -> list[MessageQueue]:
    return [MessageQueue(topic, "broker-a", i) for i in ids]


def test_queues_allocated_elsewhere_are_dropped_and_other_topics_are_left_alone() -> None:
    t0, t1, t2 = _queues("T", 0, 1, 2)
    (u0,) = _queues("U", 0)
    owned = {mq: ProcessQueue() for mq in (t0, t1, t2, u0)}
    assert stale_queues(owned, "T", {t1, t2}) == [t0]
    assert stale_queues(owned, "T", {t0, t1, t2}) == []
    assert stale_queues(owned, "U", set()) == [u0]


def test_a_queue_not_pulled_for_too_long_or_already_dropped_is_dropped_though_still_mine() -> None:
    t0, t1, t2 = _queues("T", 0, 1, 2)
    idle, dropped = ProcessQueue(), ProcessQueue()
    idle.last_pull_time = time.monotonic() - PULL_MAX_IDLE_S - 1
    dropped.dropped = True
    owned = {t0: idle, t1: dropped, t2: ProcessQueue()}
    assert stale_queues(owned, "T", {t0, t1, t2}) == [t0, t1]
