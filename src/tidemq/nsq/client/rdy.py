"""The consumer's RDY distribution and backoff (go-nsq ``consumer.go``; docs/protocols/nsq-client.md#rdy,
docs/protocols/nsq-client.md#backoff).

RDY is a window per connection (nsqd never decrements it), so the sum of RDY sent to all nsqd bounds the
messages the consumer holds unacknowledged; every change goes through ``update`` which keeps that sum at or
below ``max_in_flight``. With fewer credits than connections, the redistribution timer rotates single
credits so quiet nsqd give theirs up to ones with messages.

One deliberate difference from go-nsq: lowering a connection's RDY is always allowed (go-nsq refuses any
update while the total is at or over the maximum, so ``change_max_in_flight`` to a smaller non-zero value
left the old, larger windows in place). A decrease can never exceed the maximum.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
from collections.abc import Callable

from tidemq.nsq.client.config import Config, backoff_duration
from tidemq.nsq.client.conn import NsqdConn
from tidemq.nsq.client.errors import NotConnectedError
from tidemq.nsq.protocol import encode_command

log = logging.getLogger(__name__)

#: go-nsq's retry delay for a connection that could not leave RDY 0 (prevents permanent starvation).
RDY_RETRY_DELAY = 5.0


class Signal(enum.Enum):
    RESUME = "resume"  # FIN
    BACKOFF = "backoff"  # REQ
    CONTINUE = "continue"  # REQ without backoff


class RdyController:
    def __init__(
        self, config: Config, conns: Callable[[], list[NsqdConn]], stopping: Callable[[], bool]
    ) -> None:
        self.config = config
        self.max_in_flight = config.max_in_flight
        self.total_rdy = 0
        self.need_redistribute = False
        self.backoff_counter = 0
        self._backoff_timer: asyncio.TimerHandle | None = None
        self._retry: dict[NsqdConn, asyncio.TimerHandle] = {}
        self._conns = conns
        self._stopping = stopping
        self.rng = random.Random()

    @property
    def in_backoff(self) -> bool:
        return self.backoff_counter > 0

    @property
    def in_backoff_timeout(self) -> bool:
        return self._backoff_timer is not None

    def per_conn_max_in_flight(self) -> int:
        m = self.max_in_flight
        n = len(self._conns())
        if n == 0:
            return m
        return int(min(max(1.0, m / n), m))

    # --- RDY updates ----------------------------------------------------------------------------------

    def maybe_update(self, conn: NsqdConn) -> None:
        if self.in_backoff or self.in_backoff_timeout:
            log.debug("%s: not sending RDY while backing off", conn.addr)
            return
        count = self.per_conn_max_in_flight()
        if not self.update(conn, count):
            log.debug("%s: could not send RDY %d", conn.addr, count)

    def update(self, conn: NsqdConn, count: int) -> bool:
        if conn.closing or conn.is_closed:
            return False
        count = min(count, conn.max_rdy_count)
        self._cancel_retry(conn)
        room = self.max_in_flight - self.total_rdy + conn.rdy
        if 0 < room < count:
            count = room
        if room <= 0 and count > 0 and count > conn.rdy:
            if conn.rdy == 0:
                loop = asyncio.get_running_loop()
                self._retry[conn] = loop.call_later(RDY_RETRY_DELAY, self._retry_update, conn, count)
            return False
        return self._send(conn, count)

    def _retry_update(self, conn: NsqdConn, count: int) -> None:
        self._retry.pop(conn, None)
        self.update(conn, count)

    def _send(self, conn: NsqdConn, count: int) -> bool:
        if count == 0 and conn.rdy == 0:
            return True
        self.total_rdy += count - conn.rdy
        last = conn.rdy
        conn.rdy = count
        if count > 0:
            conn.last_rdy_time = asyncio.get_running_loop().time()
        if count == last:
            return True
        try:
            conn.send(encode_command("RDY", str(count)))
        except NotConnectedError:
            return False
        return True

    def _cancel_retry(self, conn: NsqdConn) -> bool:
        timer = self._retry.pop(conn, None)
        if timer is None:
            return False
        timer.cancel()
        return True

    def change_max_in_flight(self, value: int) -> None:
        if value == self.max_in_flight:
            return
        self.max_in_flight = value
        for conn in self._conns():
            self.maybe_update(conn)

    def on_conn_closed(self, conn: NsqdConn, remaining: int) -> None:
        rdy = conn.rdy
        self.total_rdy -= rdy
        conn.rdy = 0
        had_retry = self._cancel_retry(conn)
        if (had_retry or rdy > 0) and (remaining == self.max_in_flight or self.in_backoff):
            self.need_redistribute = True

    # --- redistribution -------------------------------------------------------------------------------

    def redistribute(self) -> None:
        if self.in_backoff_timeout:
            return
        conns = self._conns()
        if not conns:
            return
        if len(conns) > self.max_in_flight:
            self.need_redistribute = True
        if self.in_backoff and len(conns) > 1:
            self.need_redistribute = True
        if not self.need_redistribute:
            return
        self.need_redistribute = False
        now = asyncio.get_running_loop().time()
        candidates = []
        for conn in conns:
            if conn.rdy > 0:
                if now - conn.last_msg_time > self.config.low_rdy_idle_timeout:
                    log.debug("%s: idle connection, giving up RDY", conn.addr)
                    self.update(conn, 0)
                elif now - conn.last_rdy_time > self.config.low_rdy_timeout:
                    log.debug("%s: RDY timeout, giving up RDY", conn.addr)
                    self.update(conn, 0)
            candidates.append(conn)
        available = (1 if self.in_backoff else self.max_in_flight) - self.total_rdy
        while candidates and available > 0:
            available -= 1
            conn = candidates.pop(self.rng.randrange(len(candidates)))
            log.debug("%s: redistributing RDY", conn.addr)
            self.update(conn, 1)

    # --- backoff --------------------------------------------------------------------------------------

    def signal(self, sig: Signal) -> None:
        """A FIN/REQ result; call it before writing the FIN/REQ so RDY 0 reaches nsqd first."""
        if self.in_backoff_timeout:
            return
        updated = False
        if sig is Signal.RESUME:
            if self.backoff_counter > 0:
                self.backoff_counter -= 1
                updated = True
        elif sig is Signal.BACKOFF:
            upcoming = backoff_duration(self.config, self.backoff_counter + 1, self.rng.random())
            if upcoming <= self.config.max_backoff_duration:
                self.backoff_counter += 1
                updated = True
        if self.backoff_counter == 0 and updated:
            count = self.per_conn_max_in_flight()
            log.warning("exiting backoff, returning all to RDY %d", count)
            for conn in self._conns():
                self.update(conn, count)
        elif self.backoff_counter > 0:
            duration = min(
                backoff_duration(self.config, self.backoff_counter, self.rng.random()),
                self.config.max_backoff_duration,
            )
            log.warning(
                "backing off for %.3fs (backoff level %d), setting all to RDY 0",
                duration,
                self.backoff_counter,
            )
            for conn in self._conns():
                self.update(conn, 0)
            self._start_backoff_timer(duration)

    def _start_backoff_timer(self, duration: float) -> None:
        self._backoff_timer = asyncio.get_running_loop().call_later(duration, self._resume)

    def _resume(self) -> None:
        """The backoff window is over: let exactly one message through on a random connection."""
        self._backoff_timer = None
        if self._stopping():
            return
        conns = self._conns()
        if not conns:
            log.warning("no connection available to resume; backing off for 1s")
            self._start_backoff_timer(1.0)
            return
        choice = conns[self.rng.randrange(len(conns))]
        log.warning("%s: backoff timeout expired, sending RDY 1", choice.addr)
        if not self.update(choice, 1):
            log.warning("%s: could not resume with RDY 1; backing off for 1s", choice.addr)
            self._start_backoff_timer(1.0)

    def close(self) -> None:
        if self._backoff_timer is not None:
            self._backoff_timer.cancel()
            self._backoff_timer = None
        for timer in self._retry.values():
            timer.cancel()
        self._retry.clear()
