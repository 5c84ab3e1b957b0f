"""One connection's publishing: PUB, MPUB and DPUB from the checked line to the stored messages and their
OK (docs/protocols/nsq-tcp.md).

Kept apart from the connection's state machine (connection.py) because it has its own state: the lines
already found good, the publishes stored but not yet answered (sync flush: one fsync answers them all,
in order) and the per-topic counts /stats shows. The connection decides *when* a publish runs (inline,
or in its worker while AUTH may make it wait); this decides what it does.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from tidemq.nsq.nsqd.chunked_publish import BIG_MPUB_MESSAGES
from tidemq.nsq.nsqd.lifecycle import Writer
from tidemq.nsq.nsqd.verbs import check_publish_line
from tidemq.nsq.protocol import Command, decode_mpub, decode_mpub_steps, mpub_count, parse_int

if TYPE_CHECKING:
    from tidemq.nsq.nsqd.connection import NsqConnection

#: How many distinct good publish lines (and topic names) a connection remembers before it starts over.
_GOOD_LINES_KEPT = 64
#: Each publish verb's name and error code, looked up once per publish instead of decoded and formatted.
_VERB_TEXT = {verb: (verb.decode(), f"E_{verb.decode()}_FAILED") for verb in (b"PUB", b"MPUB", b"DPUB")}


class Publisher:
    """The publishing half of one ``NsqConnection``."""

    def __init__(self, conn: NsqConnection) -> None:
        self.conn = conn
        self.nsqd = conn.nsqd
        #: Messages published per topic by this client (/stats ``pub_counts``).
        self.pub_counts: dict[str, int] = {}
        #: Sync flush: (log end, error code) of publishes stored but not yet answered.
        self.unanswered: list[tuple[int, str]] = []
        #: AWAITING_FSYNC while the worker waits for the fsync that answers the publishes it took.
        self.writer = Writer.WRITING
        #: Publish lines (verb, params) that passed ``check_publish_line``.
        self._good_lines: set[tuple[bytes, ...]] = set()
        #: Topic names as sent and decoded: a producer repeats the same few (bounded as the lines are).
        self._topics: dict[bytes, str] = {}
        #: The store's flush mode, fixed for the server's life.
        self._sync_flush = conn.nsqd.sync_flush

    def check_line(self, cmd: Command) -> None:
        """``check_publish_line``, skipped for a line already found good: the check depends on the line
        alone, and a producer repeats the same few lines (a bounded set)."""
        line = (cmd.name, *cmd.params)
        good = self._good_lines
        if line in good:
            return
        check_publish_line(cmd, self.nsqd.config.max_req_timeout_ms)
        if len(good) >= _GOOD_LINES_KEPT:
            good.clear()
        good.add(line)

    async def publish(self, cmd: Command) -> None:
        """PUB, MPUB or DPUB, as the line check (before the body was read) allowed it."""
        if is_big_mpub(cmd):
            await self._publish_big(cmd)
            return
        bodies = self._bodies(cmd)
        await self.conn.auth_session.check(_VERB_TEXT[cmd.name][0], self._topic(cmd.params[0]))
        self._store(cmd, bodies)

    async def _publish_big(self, cmd: Command) -> None:
        """An MPUB of many messages: decoded and stored in steps that let the loop run others
        (nsqd/chunked_publish.py); answered after the publishes before it."""
        bodies: list[bytes] = []
        for _ in decode_mpub_steps(cmd.body or b"", self.nsqd.config.max_msg_size, bodies):
            await asyncio.sleep(0)
        topic = self._topic(cmd.params[0])
        await self.conn.auth_session.check("MPUB", topic)
        await self.answer_publishes()
        await self.nsqd.publish(topic, bodies, error_code="E_MPUB_FAILED")
        self.pub_counts[topic] = self.pub_counts.get(topic, 0) + len(bodies)
        self.conn.output.send_ok()

    def publish_inline(self, cmd: Command) -> bool:
        """``publish`` without a task: what the connection runs inline when no AUTH can make it wait.
        Returns False: a publish leaves no channel of this connection to pump."""
        self._store(cmd, self._bodies(cmd))
        return False

    def _bodies(self, cmd: Command) -> list[bytes]:
        if cmd.name == b"MPUB":
            return decode_mpub(cmd.body or b"", self.nsqd.config.max_msg_size)
        return [cmd.body or b""]

    def _topic(self, raw: bytes) -> str:
        topic = self._topics.get(raw)
        if topic is None:
            if len(self._topics) >= _GOOD_LINES_KEPT:
                self._topics.clear()
            topic = self._topics[raw] = raw.decode(errors="replace")
        return topic

    def _store(self, cmd: Command, bodies: list[bytes]) -> None:
        verb, error_code = _VERB_TEXT[cmd.name]
        topic = self._topic(cmd.params[0])
        defer_ms = parse_int(cmd.params[1], verb, "timeout") if verb == "DPUB" else 0
        end_offset = self.nsqd.append(topic, bodies, defer_ms=defer_ms, error_code=error_code)
        counts = self.pub_counts
        counts[topic] = counts.get(topic, 0) + len(bodies)
        if self._sync_flush:
            self.unanswered.append((end_offset, error_code))
        else:
            self.conn.output.send_ok()

    async def answer_publishes(self) -> None:
        """Sync flush: answer the publishes stored so far once one fsync covers them all, in order.

        Pipelined publishes on one connection are appended back to back and share that fsync (group
        commit) instead of each waiting for its own.
        """
        if not self.unanswered:
            return
        unanswered, self.unanswered = self.unanswered, []
        end_offset, error_code = max(unanswered)
        self.writer = Writer.AWAITING_FSYNC
        try:
            await self.nsqd.wait_durable(end_offset, error_code)
        finally:
            self.writer = Writer.WRITING
        for _ in unanswered:
            self.conn.output.send_ok()


def is_big_mpub(cmd: Command) -> bool:
    """An MPUB stored in steps (``_publish_big``), never inline."""
    return cmd.name == b"MPUB" and mpub_count(cmd.body) > BIG_MPUB_MESSAGES
