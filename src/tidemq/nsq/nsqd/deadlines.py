"""A heap of deadlines over keys that mostly leave before their deadline: messages in flight.

Keys share a deadline in groups (the messages of one write to a client share one). A key leaves early
(FIN, REQ, or a TOUCH that moves it to a group of its own) without being taken out of the heap: that
would cost a walk of the heap. Instead the rule is *lazy deletion*, kept here in one place:

- a key in a popped group is due only if the live mapping still holds it under that same group;
- the heap counts the keys it holds, live or not, and once leftovers outnumber the live keys (twice the
  live ones plus ``slack``) it is rebuilt from the live mapping, so a fast drain does not leave a mass of
  dead deadlines that come due together later and stall a timer scan.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Generic, Protocol, TypeVar


class Timed(Protocol):
    """A group of keys: its deadline (``time.monotonic()`` seconds). Hashed by identity."""

    @property
    def deadline(self) -> float: ...


K = TypeVar("K")
V = TypeVar("V")
G = TypeVar("G", bound=Timed)


class DeadlineHeap(Generic[K, V, G]):
    """Deadlines of the keys of ``live``; ``group_of(live[key])`` is the group a key is due with now, and
    ``slack`` the leftover keys tolerated beyond twice the live ones."""

    __slots__ = ("_count", "_group_of", "_heap", "_live", "_slack", "_tiebreak")

    def __init__(self, live: Mapping[K, V], group_of: Callable[[V], G], slack: int) -> None:
        self._live = live
        self._group_of = group_of
        self._slack = slack
        #: (deadline, tiebreak, keys, group): the groups come due in deadline order.
        self._heap: list[tuple[float, int, list[K], G]] = []
        self._count = 0  # keys in the heap, live or not
        self._tiebreak = itertools.count()

    def __len__(self) -> int:
        """Keys held, leftovers included."""
        return self._count

    def push(self, group: G, keys: list[K]) -> None:
        """``keys`` are due at ``group.deadline`` (each still due with an earlier group is moved, lazily)."""
        heapq.heappush(self._heap, (group.deadline, next(self._tiebreak), keys, group))
        self._count += len(keys)

    def prune(self) -> None:
        """Keys left ``live``: rebuild the heap once its leftovers outnumber the live keys."""
        live = self._live
        if self._count <= 2 * len(live) + self._slack:
            return
        group_of = self._group_of
        by_group: dict[G, list[K]] = {}
        for key, value in live.items():
            by_group.setdefault(group_of(value), []).append(key)
        tiebreak = self._tiebreak
        self._heap = [(group.deadline, next(tiebreak), keys, group) for group, keys in by_group.items()]
        heapq.heapify(self._heap)
        self._count = len(live)

    def pop_due(self, now: float) -> Iterator[tuple[K, G]]:
        """Each live key whose deadline is at or before ``now``, with its group, in deadline order; the
        caller takes it out of ``live`` before the next one is looked at."""
        live, group_of = self._live, self._group_of
        while self._heap and self._heap[0][0] <= now:
            _, _, keys, group = heapq.heappop(self._heap)
            self._count -= len(keys)
            for key in keys:
                value = live.get(key)
                if value is not None and group_of(value) is group:
                    yield key, group

    def clear(self) -> None:
        self._heap.clear()
        self._count = 0
