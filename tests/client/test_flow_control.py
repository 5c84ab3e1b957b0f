"""Flow control and the process queue's bookkeeping: when a pull waits, and which offset may be committed."""

from __future__ import annotations

from tidemq.client.consumer.core import ConsumerCore
from tidemq.client.consumer.lite_pull import LitePullConsumer
from tidemq.client.consumer.process_queue import ProcessQueue
from tidemq.client.consumer.pulling import flow_control_reason
from tidemq.record import MessageExt


def _core(count: int = 10, size_mib: int = 1, span: int = 100) -> ConsumerCore:
    return LitePullConsumer(
        "FlowGroup",
        "127.0.0.1:1",
        pull_threshold_for_queue=count,
        pull_threshold_size_for_queue_mib=size_mib,
        consume_concurrently_max_span=span,
    ).core


def _msgs(*offsets: int, size: int = 1) -> list[MessageExt]:
    return [MessageExt("T", b"x" * size, queue_offset=o) for o in offsets]


def test_no_reason_within_every_threshold() -> None:
    pq = ProcessQueue()
    pq.put(_msgs(*range(10)))
    assert flow_control_reason(_core(), pq) is None


def test_cached_count_over_the_threshold_holds_the_pull() -> None:
    pq = ProcessQueue()
    pq.put(_msgs(*range(11)))
    assert flow_control_reason(_core(), pq) == "11 cached messages > 10"


def test_arriving_messages_count_as_cached() -> None:
    pq = ProcessQueue()
    pq.put(_msgs(*range(8)))
    core = _core()
    assert flow_control_reason(core, pq, arriving=2) is None
    assert flow_control_reason(core, pq, arriving=3) == "11 cached messages > 10"


def test_cached_size_over_the_threshold_holds_the_pull() -> None:
    pq = ProcessQueue()
    pq.put(_msgs(0, 1, size=600 * 1024))
    assert flow_control_reason(_core(), pq) == "1 MiB cached > 1 MiB"
    assert flow_control_reason(_core(size_mib=2), pq) is None


def test_offset_span_holds_a_concurrent_pull_but_not_an_orderly_one() -> None:
    pq = ProcessQueue()
    pq.put(_msgs(0, 101))
    core = _core()
    assert flow_control_reason(core, pq) == "offset span 101 > 100"
    core.orderly = True
    assert flow_control_reason(core, pq) is None, "orderly queues are consumed in order: no span limit"


def test_commit_offset_is_the_smallest_offset_still_held() -> None:
    pq = ProcessQueue()
    a, b, c = _msgs(5, 6, 7)
    pq.put([a, b, c])
    assert pq.remove([b]) == 5, "5 is not consumed yet"
    assert pq.remove([a]) == 7
    assert pq.remove([c]) == 8, "all consumed: one past the largest seen"
    assert (pq.msg_count, pq.msg_size, pq.span) == (0, 0, 0)


def test_a_message_pulled_twice_is_held_once() -> None:
    pq = ProcessQueue()
    pq.put(_msgs(0, 1, size=3))
    pq.put(_msgs(1, 2, size=3))
    assert (pq.msg_count, pq.msg_size) == (3, 9)


def test_put_dispatches_an_orderly_consumer_only_when_none_runs() -> None:
    pq = ProcessQueue()
    assert pq.put(_msgs(0)) is True
    assert pq.put(_msgs(1)) is False, "a consumer is already running on the queue"
    assert [m.queue_offset for m in pq.take(5)] == [0, 1]
    assert pq.take(5) == [] and not pq.consuming
    assert pq.put(_msgs(2)) is True


def test_orderly_commit_and_rollback() -> None:
    pq = ProcessQueue()
    pq.put(_msgs(0, 1, 2, 3))
    pq.take(2)
    assert pq.commit() == 2
    assert pq.commit() == -1, "nothing taken since"
    pq.take(1)
    pq.rollback()
    assert [m.queue_offset for m in pq.take(5)] == [2, 3], "the rolled-back message comes first again"
    assert pq.msg_count == 2
