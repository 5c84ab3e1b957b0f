"""DeadlineHeap's lazy deletion: a key is due only with the group it still has, and leftovers are pruned."""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter

from tidemq.nsq.nsqd.deadlines import DeadlineHeap


@dataclass(slots=True, eq=False)
class Group:
    deadline: float


def make(slack: int = 0) -> tuple[dict[str, tuple[int, Group]], DeadlineHeap[str, tuple[int, Group], Group]]:
    live: dict[str, tuple[int, Group]] = {}
    return live, DeadlineHeap(live, itemgetter(1), slack)


def test_due_keys_come_in_deadline_order_and_only_once_due() -> None:
    live, heap = make()
    late, early = Group(2.0), Group(1.0)
    for key, group in (("c", late), ("a", early), ("b", early)):
        live[key] = (0, group)
    heap.push(late, ["c"])
    heap.push(early, ["a", "b"])
    assert list(heap.pop_due(0.5)) == []
    assert list(heap.pop_due(1.0)) == [("a", early), ("b", early)]
    assert list(heap.pop_due(5.0)) == [("c", late)]
    assert len(heap) == 0


def test_a_key_that_left_or_moved_is_not_due_with_its_old_group() -> None:
    live, heap = make()
    first, touched = Group(1.0), Group(3.0)
    live.update({"gone": (0, first), "moved": (0, first), "stays": (0, first)})
    heap.push(first, ["gone", "moved", "stays"])
    del live["gone"]  # finished
    live["moved"] = (0, touched)  # touched: due with its new group only
    heap.push(touched, ["moved"])
    assert list(heap.pop_due(2.0)) == [("stays", first)]
    assert list(heap.pop_due(3.0)) == [("moved", touched)]


def test_the_caller_takes_each_due_key_out_before_the_next() -> None:
    live, heap = make()
    group = Group(1.0)
    live.update({"a": (0, group), "b": (0, group)})
    heap.push(group, ["a", "b"])
    for key, _ in heap.pop_due(1.0):
        del live[key]
    assert live == {}


def test_prune_rebuilds_once_leftovers_outnumber_the_live_keys() -> None:
    live, heap = make(slack=2)
    groups = [Group(float(i)) for i in range(10)]
    for i, group in enumerate(groups):
        live[str(i)] = (i, group)
        heap.push(group, [str(i)])
    for i in range(6):
        del live[str(i)]
    heap.prune()  # 10 held <= 2 * 4 live + 2: kept as is
    assert len(heap) == 10
    del live["6"]
    heap.prune()  # 10 held > 2 * 3 live + 2: rebuilt from what is live
    assert len(heap) == 3
    assert list(heap.pop_due(100.0)) == [("7", groups[7]), ("8", groups[8]), ("9", groups[9])]


def test_prune_keeps_the_keys_of_one_group_together() -> None:
    live, heap = make()
    shared, other = Group(1.0), Group(2.0)
    live.update({"a": (0, shared), "b": (0, shared)})
    heap.push(shared, ["a", "b"])
    for i in range(5):
        heap.push(other, [f"dead{i}"])
    heap.prune()
    assert len(heap) == 2
    assert list(heap.pop_due(1.0)) == [("a", shared), ("b", shared)]


def test_clear_forgets_everything() -> None:
    live, heap = make()
    group = Group(1.0)
    live["a"] = (0, group)
    heap.push(group, ["a"])
    heap.clear()
    assert len(heap) == 0 and list(heap.pop_due(10.0)) == []
