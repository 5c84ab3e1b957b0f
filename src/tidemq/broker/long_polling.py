"""Held pulls (Java PullRequestHoldService), with a precise timer per request instead of a 5 s sweep.

A pull that finds nothing new is parked here; it is answered the moment a matching message lands on
its queue, or when its suspend timeout runs out, by running the pull again with suspension forbidden.
The answer is written from here at once, while the request that stored the message is still being handled
and before that request's own answer: the consumer is waiting on it (end-to-end latency), the producer can
wait a moment. (Holding it to the end of that input, to coalesce it with other wakes, measured worse.)

Held pulls are bounded per connection and in total (docs/rocketmq-broker.md#connection-limits): a Java
consumer holds one pull per queue it owns, so the bounds are far above what a client needs, and a pull
past them is refused SYSTEM_BUSY, the answer Java gives when its pull thread pool's queue
(``pullThreadPoolQueueCapacity``, 100,000) is full; its client retries after a delay. Held pulls are
indexed by connection as well as by queue, so a connection's teardown costs what it held, released in
chunks that let the loop serve others in between.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass

from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.transport import RemotingConnection

Rerun = Callable[[RemotingConnection, RemotingCommand], RemotingCommand | None]

#: Held pulls one connection may have (far above one per queue of a large consumer).
MAX_HELD_PER_CONNECTION = 10_000
#: Held pulls in all, Java's pullThreadPoolQueueCapacity.
MAX_HELD_TOTAL = 100_000
#: Held pulls of a closed connection released per loop pass.
_RELEASE_CHUNK = 2_000


@dataclass(slots=True, eq=False)
class HeldPull:
    conn: RemotingConnection
    request: RemotingCommand
    offset: int
    match: Callable[[int], bool] | None
    timer: asyncio.TimerHandle | None = None


class PullHoldService:
    def __init__(
        self,
        rerun: Rerun,
        *,
        max_per_connection: int = MAX_HELD_PER_CONNECTION,
        max_total: int = MAX_HELD_TOTAL,
    ) -> None:
        self._rerun = rerun
        self.max_per_connection = max_per_connection
        self.max_total = max_total
        # Dicts used as ordered sets: O(1) removal, answered in the order they were held.
        self._held: dict[tuple[str, int], dict[HeldPull, tuple[str, int]]] = {}
        self._by_conn: dict[RemotingConnection, dict[HeldPull, tuple[str, int]]] = {}
        self._count = 0

    def refusal(self, conn: RemotingConnection) -> str | None:
        """Why a pull from ``conn`` may not be held now, or ``None`` when it may."""
        mine = self._by_conn.get(conn)
        if mine is not None and len(mine) >= self.max_per_connection:
            return (
                f"[OVERLOAD]system busy, start flow control for a while: "
                f"{len(mine)} pulls held for this connection (limit {self.max_per_connection})"
            )
        if self._count >= self.max_total:
            return (
                f"[OVERLOAD]system busy, start flow control for a while: "
                f"{self._count} pulls held (limit {self.max_total})"
            )
        return None

    def hold(
        self,
        topic: str,
        queue_id: int,
        conn: RemotingConnection,
        request: RemotingCommand,
        offset: int,
        match: Callable[[int], bool] | None,
        timeout_s: float,
    ) -> None:
        """Park a pull; the processor returns ``None`` and the answer comes from here later."""
        held = HeldPull(conn, request, offset, match)
        key = (topic, queue_id)
        self._held.setdefault(key, {})[held] = key
        self._by_conn.setdefault(conn, {})[held] = key
        self._count += 1
        held.timer = asyncio.get_running_loop().call_later(timeout_s, self._release, key, held)

    def _forget(self, key: tuple[str, int], held: HeldPull) -> bool:
        """Drop a held pull from both indexes; False when it was answered already."""
        waiting = self._held.get(key)
        if waiting is None or waiting.pop(held, None) is None:
            return False
        if not waiting:
            del self._held[key]
        mine = self._by_conn.get(held.conn)
        if mine is not None:
            mine.pop(held, None)
            if not mine:
                del self._by_conn[held.conn]
        self._count -= 1
        if held.timer is not None:
            held.timer.cancel()
        return True

    def _release(self, key: tuple[str, int], held: HeldPull) -> None:
        if not self._forget(key, held):
            return  # answered already
        if held.conn.is_closed:
            return
        try:
            response = self._rerun(held.conn, held.request)
        except Exception as exc:
            response = held.conn.failure_response(held.request, exc)
        held.conn.reply_now(held.request, response)

    def notify(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        """A message was dispatched to (topic, queue): wake the pulls it satisfies."""
        waiting = self._held.get((topic, queue_id))
        if not waiting:
            return
        for held in list(waiting):
            if max_offset > held.offset and (held.match is None or held.match(tags_code)):
                self._release((topic, queue_id), held)

    def connection_closed(self, conn: RemotingConnection) -> None:
        """Forget a closed connection's held pulls, a chunk per loop pass (nobody is waiting for them)."""
        mine = self._by_conn.get(conn)
        if not mine:
            return
        for held, key in list(itertools.islice(mine.items(), _RELEASE_CHUNK)):
            self._forget(key, held)
        if conn in self._by_conn:
            asyncio.get_running_loop().call_soon(self.connection_closed, conn)

    @property
    def held_count(self) -> int:
        return self._count
