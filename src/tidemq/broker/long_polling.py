"""Held pulls (Java PullRequestHoldService), with a precise timer per request instead of a 5 s sweep.

A pull that finds nothing new is parked here; it is answered the moment a matching message lands on
its queue, or when its suspend timeout runs out, by running the pull again with suspension forbidden.
The answer is written from here at once, while the request that stored the message is still being handled
and before that request's own answer: the consumer is waiting on it (end-to-end latency), the producer can
wait a moment. (Holding it to the end of that input, to coalesce it with other wakes, measured worse.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.transport import RemotingConnection

Rerun = Callable[[RemotingConnection, RemotingCommand], RemotingCommand | None]


@dataclass(slots=True, eq=False)
class HeldPull:
    conn: RemotingConnection
    request: RemotingCommand
    offset: int
    match: Callable[[int], bool] | None
    timer: asyncio.TimerHandle | None = None


class PullHoldService:
    def __init__(self, rerun: Rerun) -> None:
        self._rerun = rerun
        self._held: dict[tuple[str, int], list[HeldPull]] = {}

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
        self._held.setdefault(key, []).append(held)
        held.timer = asyncio.get_running_loop().call_later(timeout_s, self._release, key, held)

    def _release(self, key: tuple[str, int], held: HeldPull) -> None:
        waiting = self._held.get(key)
        if waiting is None or held not in waiting:
            return  # answered already
        waiting.remove(held)
        if not waiting:
            del self._held[key]
        if held.timer is not None:
            held.timer.cancel()
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
        for key, waiting in list(self._held.items()):
            for held in [h for h in waiting if h.conn is conn]:
                self._release(key, held)

    @property
    def held_count(self) -> int:
        return sum(len(v) for v in self._held.values())
