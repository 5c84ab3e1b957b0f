"""Channels on tidemq's store (docs/protocols/nsq-nsqd.md); their topic is nsqd/topic.py.

A topic is a log in the store (topic ``nsq:<name>``, queue 0); the message id is the log offset in 16
lower-case hex digits. A channel is a durable cursor over that log with its requeued, deferred and
in-flight sets. What a channel persists (its cursor, every offset read but not finished, with its
attempts, and the FINs since in the FIN journal) is enough to redeliver exactly the unfinished messages
after a crash.
"""

from __future__ import annotations

import heapq
import logging
import random
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Protocol

from tidemq.nsq.nsqd.chunked_publish import overlap
from tidemq.nsq.nsqd.deadlines import DeadlineHeap
from tidemq.nsq.nsqd.fin_journal import channel_key
from tidemq.nsq.nsqd.quantile import E2eLatency
from tidemq.nsq.protocol import is_ephemeral
from tidemq.record import key_prefix, property_value, record_bodies
from tidemq.store import GetResult, GetStatus, MessageStore

if TYPE_CHECKING:
    from tidemq.nsq.nsqd.topic import Topic

log = logging.getLogger(__name__)

STORE_PREFIX = "nsq:"
PROP_TIMESTAMP = "NSQ_TS"
PROP_DEFER = "NSQ_DEFER"
_TIMESTAMP_KEY = key_prefix(PROP_TIMESTAMP)
_DEFER_KEY = key_prefix(PROP_DEFER)
#: Records read from the store at a time (also bounded by the store's bytes per read).
READ_AHEAD = 256
#: A delivery stops adding messages once its write holds this many bytes of bodies (at least one goes):
#: with RDY 2500 and 1 MiB messages one write would otherwise be 2.5 GB.
WRITE_BYTES = 1024 * 1024
#: Leftover in-flight deadlines a channel tolerates beyond twice its live ones before it rebuilds them.
DEADLINE_SLACK = 1024


def now_ms() -> int:
    return int(time.time() * 1000)


class Subscriber(Protocol):
    """What a channel needs from a connected consumer."""

    client_id: str
    rdy: int
    in_flight: int
    msg_timeout_ms: int
    sample_rate: int

    @property
    def receiving(self) -> bool: ...

    def send_messages(self, messages: list[tuple[int, int, bytes, bytes]]) -> None:
        """Write (timestamp ns, attempts, id, body) message frames, in order."""

    def close(self) -> None: ...


#: A message read and waiting: (offset, nsqd timestamp in ns, body, due time in ms or 0). A plain tuple:
#: one is made per message on the delivery path, where a class instance costs several times as much.
_Stored = tuple[int, int, bytes, int]


@dataclass(slots=True, eq=False)
class Delivery:
    """What the messages of one write to a client share while in flight: the owner, when they went out
    and their timeout deadline (a TOUCH gives a message a delivery of its own). One per write rather than
    per message: a message in flight costs a tuple and a dict entry, and the write one heap entry."""

    client: Subscriber
    delivered_at: float
    deadline: float


#: A message in flight, under its id: (offset, delivery, timestamp_ns): its log offset, the write that
#: delivered it, its nsqd timestamp in ns. A plain tuple, read by unpacking into those names: one is made
#: per message on the delivery path, where a NamedTuple or slotted instance costs several times as much.
InFlight = tuple[int, Delivery, int]
_delivery_of: Callable[[InFlight], Delivery] = itemgetter(1)


@dataclass(slots=True)
class MemoryBudget:
    """How many bytes of message bodies channels may hold in memory, waiting (their read-ahead, nsqd's
    in-memory channel queue): ``channel_bytes`` each and ``total_bytes`` over the server. Past either, a
    new message stays in the store only and is read back when a consumer gets to it; the count bound
    (--mem-queue-size) alone let one idle channel hold 10,000 x 1 MiB."""

    channel_bytes: int = 16 * 1024 * 1024
    total_bytes: int = 256 * 1024 * 1024
    used: int = 0


@dataclass(slots=True)
class ChannelStats:
    message_count: int = 0
    requeue_count: int = 0
    timeout_count: int = 0


class Channel:
    def __init__(
        self,
        topic: Topic,
        name: str,
        next_offset: int,
        pending: dict[int, int] | None = None,
        *,
        journal_id: int | None = None,
        finished: Iterable[int] = (),
    ) -> None:
        self.topic = topic
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.paused = False
        self.clients: list[Subscriber] = []
        #: Names this channel's records in the FIN journal; a channel made again under the same name (its
        #: topic's log perhaps started over) gets a new one, so old records never apply to it.
        self.journal_id = journal_id if journal_id is not None else random.getrandbits(63)
        self.journal_key = channel_key(self.journal_id)
        #: Offsets at or past the cursor already finished: FINs of messages read after the last snapshot,
        #: found in the journal after a crash. Reading skips them.
        self.finished = {offset for offset in finished if offset >= next_offset}
        while next_offset in self.finished:
            self.finished.discard(next_offset)
            next_offset += 1
        self.next_offset = next_offset
        self.attempts: dict[int, int] = dict(pending or {})  # every read-but-unfinished offset
        self.requeued: deque[int] = deque(sorted(self.attempts))
        self.read_ahead: deque[_Stored] = deque()
        #: Bytes of bodies in ``read_ahead``, counted against the topic's ``MemoryBudget`` too.
        self.read_ahead_bytes = 0
        self.deferred: list[tuple[int, int]] = []  # (due ms, offset)
        self.in_flight: dict[bytes, InFlight] = {}
        #: When each message in flight times out: with the delivery it still has in ``in_flight``.
        self.deadlines = DeadlineHeap(self.in_flight, _delivery_of, DEADLINE_SLACK)
        self.stats = ChannelStats()
        self.deleted = False
        #: Offset ranges [start, end) an ephemeral channel dropped because it was full.
        self.dropped: list[tuple[int, int]] = []
        self.latency = E2eLatency(topic.latency) if topic.latency is not None else None

    @property
    def store(self) -> MessageStore:
        return self.topic.store

    # --- what is waiting ----------------------------------------------------------------------------

    @property
    def depth(self) -> int:
        """Messages waiting for delivery (nsqd's depth: not in flight, not deferred)."""
        unread = max(0, self.topic.readable_end - self.next_offset)
        unread -= sum(
            end - max(start, self.next_offset) for start, end in self.dropped if end > self.next_offset
        )
        if self.topic.aborted:  # stored by a chunked MPUB that failed midway: never delivered
            unread -= overlap(self.topic.aborted, self.next_offset, self.topic.readable_end)
        return unread + len(self.read_ahead) + len(self.requeued)

    @property
    def read_floor(self) -> int:
        """The lowest offset this channel may read from the log again (the snapshot's cursor)."""
        return self.read_ahead[0][0] if self.read_ahead else self.next_offset

    def snapshot(self) -> dict[str, Any]:
        """The cursor and what must come again: the read-ahead (never delivered) is left to be read
        again from the cursor, so the snapshot stays small however much a channel holds in memory."""
        start = self.read_ahead[0][0] if self.read_ahead else self.next_offset
        snapshot: dict[str, Any] = {
            "name": self.name,
            "paused": self.paused,
            "next": start,
            "pending": {str(o): a for o, a in self.attempts.items() if a or o < start},
            "id": self.journal_id,
        }
        finished = self._finished_from(start)
        if finished:
            snapshot["finished"] = finished
        return snapshot

    def _finished_from(self, start: int) -> list[int]:
        """Offsets from ``start`` on that are finished although the cursor saved is before them: a DPUB
        (or a requeue) released and FINed among messages still held in the read-ahead, and FINs found in
        the journal after a crash. Between ``start`` and the read position every offset not read-ahead is
        known to ``attempts`` unless it is finished (or sampled out, which is finished for this channel)."""
        found = sorted(self.finished)
        if self.next_offset - start > len(self.read_ahead):  # a gap in the read-ahead: something finished
            attempts = self.attempts
            found = [o for o in range(start, self.next_offset) if o not in attempts] + found
        return found

    # --- delivery ------------------------------------------------------------------------------------

    def pump(self) -> None:
        """Hand waiting messages to subscribers with RDY credit left, until either runs out."""
        if self.paused or self.topic.paused or self.deleted:
            return
        if len(self.clients) == 1:  # the usual case: fill its credit without choosing per message
            client = self.clients[0]
            if client.receiving:
                self._deliver(client, client.rdy - client.in_flight)
            return
        while True:
            chosen = self._ready_client()
            if chosen is None or not self._deliver(chosen, 1):
                return

    def _deliver(self, client: Subscriber, count: int) -> int:
        """Send ``client`` up to ``count`` waiting messages, as one write; returns how many it got."""
        attempts, in_flight, read_ahead = self.attempts, self.in_flight, self.read_ahead
        sample_rate = client.sample_rate
        now = time.monotonic()
        delivery = Delivery(client, now, now + client.msg_timeout_ms / 1000)
        batch: list[tuple[int, int, bytes, bytes]] = []
        append = batch.append
        room = WRITE_BYTES
        try:
            while len(batch) < count and room > 0:
                if read_ahead and not self.requeued:
                    item = read_ahead.popleft()
                    self._release(len(item[2]))
                else:
                    next_item = self._next()
                    if next_item is None:
                        break
                    item = next_item
                offset, timestamp_ns, body, _ = item
                if sample_rate and _sampled_out(sample_rate):
                    attempts.pop(offset, None)  # nsqd drops a sampled-out message for this channel
                    continue
                tries = attempts.get(offset, 0) + 1
                attempts[offset] = tries
                msg_id = b"%016x" % offset  # the id is the log offset
                in_flight[msg_id] = (offset, delivery, timestamp_ns)
                append((timestamp_ns, tries, msg_id, body))
                room -= len(body)
        finally:  # a read that fails part way still sends what is already in flight
            if batch:
                self.deadlines.push(delivery, [msg_id for _, _, msg_id, _ in batch])
                client.send_messages(batch)
                client.in_flight += len(batch)
                self.stats.message_count += len(batch)
        return len(batch)

    def _ready_client(self) -> Subscriber | None:
        best: Subscriber | None = None
        spare = 0
        for client in self.clients:
            room = client.rdy - client.in_flight
            if client.receiving and room > spare:
                best, spare = client, room
        if best is not None:  # rotate so equally ready clients take turns
            self.clients.remove(best)
            self.clients.append(best)
        return best

    def _next(self) -> _Stored | None:
        while self.requeued:
            offset = self.requeued.popleft()
            item = self._read_one(offset)
            if item is None:
                self.attempts.pop(offset, None)  # retention removed it
            elif (due_ms := item[3]) > now_ms():  # a deferred publish found again after a restart
                heapq.heappush(self.deferred, (due_ms, offset))
            else:
                return item
        if not self.read_ahead:
            self._read_more()
        if not self.read_ahead:
            return None
        item = self.read_ahead.popleft()
        self._release(len(item[2]))
        return item

    def _hold(self, size: int) -> None:
        self.read_ahead_bytes += size
        self.topic.budget.used += size

    def _release(self, size: int) -> None:
        self.read_ahead_bytes -= size
        self.topic.budget.used -= size

    def release_all(self) -> None:
        """Give the read-ahead's bytes back to the budget (the channel is emptied or goes)."""
        self.read_ahead.clear()
        self._release(self.read_ahead_bytes)

    def _read_more(self) -> None:
        if self.topic.aborted:
            for start, end in self.topic.aborted:  # sorted, merged: one pass steps over each in turn
                if start <= self.next_offset < end:
                    self.next_offset = end
            self.topic.prune_aborted()
        count = min(READ_AHEAD, self.topic.readable_end - self.next_offset)
        if count <= 0:
            return  # nothing new, or only a chunked MPUB still being stored
        result = self._read(self.next_offset, count)
        if result.status is GetStatus.OFFSET_TOO_SMALL:
            log.warning(
                "channel %s/%s: messages before %d were removed by retention",
                self.topic.name,
                self.name,
                result.next_begin_offset,
            )
            self.next_offset = result.next_begin_offset
            count = min(READ_AHEAD, self.topic.readable_end - self.next_offset)
            if count <= 0:
                return
            result = self._read(self.next_offset, count)
        if result.status is not GetStatus.FOUND:
            return
        now = now_ms()
        attempts, read_ahead, finished = self.attempts, self.read_ahead, self.finished
        held = 0
        stamped_props, stamped_ms, stamp = b"", -1, (0, 0)
        aborted = self.topic.aborted
        for offset, store_ms, body, props in record_bodies(result.records):
            if aborted and any(start <= offset < end for start, end in aborted):
                continue  # a chunked MPUB that failed midway (nsqd/chunked_publish.py)
            if props != stamped_props or store_ms != stamped_ms:  # a batch's records share both
                stamped_props, stamped_ms, stamp = props, store_ms, _stamp(props, store_ms)
            if (self.dropped and self._was_dropped(offset)) or attempts.get(offset):
                continue  # dropped, or delivered before a restart: it comes again from the requeued set
            if finished and offset in finished:
                finished.discard(offset)  # FINed before a crash, after the snapshot's cursor
                continue
            attempts[offset] = 0
            timestamp_ns, due_ms = stamp
            if due_ms > now:
                heapq.heappush(self.deferred, (due_ms, offset))
            else:
                read_ahead.append((offset, timestamp_ns, body, due_ms))
                held += len(body)
        self._hold(held)
        self.next_offset = result.next_begin_offset
        if self.dropped:
            self.dropped = [r for r in self.dropped if r[1] > self.next_offset]

    def take_published(
        self, first: int, timestamp_ns: int, bodies: list[bytes], due_ms: int, limit: int, size: int
    ) -> None:
        """Messages just appended at ``first`` (``size`` bytes of bodies): a channel that had read
        everything before them takes them as they are, without reading them back from the store (nsqd's
        in-memory channel queue, up to ``limit`` waiting and the topic's ``MemoryBudget``); one that lags
        behind, or is full, reads them from the store when it gets there."""
        budget = self.topic.budget
        if (
            self.next_offset != first
            or self.dropped
            or self.finished
            or len(self.read_ahead) + len(bodies) > limit
            or (
                not due_ms
                and (
                    self.read_ahead_bytes + size > budget.channel_bytes
                    or budget.used + size > budget.total_bytes
                )
            )
        ):
            return
        attempts = self.attempts
        if due_ms:
            for offset in range(first, first + len(bodies)):
                attempts.setdefault(offset, 0)
                heapq.heappush(self.deferred, (due_ms, offset))
        else:
            append = self.read_ahead.append
            for offset, body in enumerate(bodies, first):
                attempts.setdefault(offset, 0)
                append((offset, timestamp_ns, body, 0))
            self._hold(size)
        self.next_offset = first + len(bodies)

    def _was_dropped(self, offset: int) -> bool:
        return any(start <= offset < end for start, end in self.dropped)

    def _read(self, offset: int, count: int) -> GetResult:
        return self.store.get(self.topic.store_topic, 0, offset, count, max_transfer=count)

    def _read_one(self, offset: int) -> _Stored | None:
        result = self._read(offset, 1)
        if result.status is not GetStatus.FOUND:
            return None
        offset, store_ms, body, props = record_bodies(result.records)[0]
        timestamp_ns, due_ms = _stamp(props, store_ms)
        return offset, timestamp_ns, body, due_ms

    # --- answers from consumers -----------------------------------------------------------------------

    def _owned(self, client: Subscriber, msg_id: bytes, verb: str) -> InFlight | str:
        entry = self.in_flight.get(msg_id)
        if entry is None:
            return _refusal(entry, msg_id, verb)
        _, delivery, _ = entry
        if delivery.client is not client:
            return _refusal(entry, msg_id, verb)
        return entry

    def finish_many(self, client: Subscriber, msg_ids: list[bytes]) -> tuple[int, list[str]]:
        """FIN a run of ids (a consumer's FINs come in runs) and record them in the FIN journal; returns
        the journal position that makes them durable (0: nothing to wait for) and the E_FIN_FAILED
        descriptions, in order, of those that are not this client's in-flight messages. The caller pumps
        once after."""
        in_flight, attempts = self.in_flight, self.attempts
        problems = []
        done: list[InFlight] = []
        for msg_id in msg_ids:
            entry = in_flight.get(msg_id)
            if entry is not None:
                offset, delivery, _ = entry
                if delivery.client is client:
                    del in_flight[msg_id]
                    attempts.pop(offset, None)
                    done.append(entry)
                    continue
            problems.append(_refusal(entry, msg_id, "FIN"))
        if not done:
            return 0, problems
        client.in_flight -= len(done)
        self.deadlines.prune()
        if self.latency is not None:
            now_ns = time.time_ns()
            self.latency.record([now_ns - timestamp_ns for _, _, timestamp_ns in done])
        journal = self.topic.journal
        if journal is None or self.ephemeral:
            return 0, problems
        return journal.append(self.journal_key, [offset for offset, _, _ in done]), problems

    def requeue(self, client: Subscriber, msg_id: bytes, delay_ms: int) -> str | None:
        entry = self._owned(client, msg_id, "REQ")
        if isinstance(entry, str):
            return entry
        offset, _, _ = entry
        del self.in_flight[msg_id]
        client.in_flight -= 1
        self.stats.requeue_count += 1
        self.deadlines.prune()
        if delay_ms > 0:
            heapq.heappush(self.deferred, (now_ms() + delay_ms, offset))
        else:
            self.requeued.append(offset)
        return None

    def touch(self, client: Subscriber, msg_id: bytes, max_msg_timeout_ms: int) -> str | None:
        entry = self._owned(client, msg_id, "TOUCH")
        if isinstance(entry, str):
            return entry
        offset, delivery, timestamp_ns = entry
        deadline = min(
            time.monotonic() + client.msg_timeout_ms / 1000, delivery.delivered_at + max_msg_timeout_ms / 1000
        )
        touched = Delivery(client, delivery.delivered_at, deadline)
        self.in_flight[msg_id] = (offset, touched, timestamp_ns)
        self.deadlines.push(touched, [msg_id])
        return None

    # --- timers --------------------------------------------------------------------------------------

    def process_timers(self) -> None:
        """Requeue timed-out in-flight messages and release due deferred ones."""
        moved = False
        now = time.monotonic()
        in_flight = self.in_flight
        for msg_id, delivery in self.deadlines.pop_due(now):
            offset, _, _ = in_flight.pop(msg_id)
            if delivery.client in self.clients:
                delivery.client.in_flight -= 1
            self.requeued.append(offset)
            self.stats.timeout_count += 1
            moved = True
        wall = now_ms()
        while self.deferred and self.deferred[0][0] <= wall:
            _, offset = heapq.heappop(self.deferred)
            self.requeued.append(offset)
            moved = True
        if moved:
            self.pump()

    # --- membership and administration ------------------------------------------------------------------

    def add_client(self, client: Subscriber) -> None:
        self.clients.append(client)

    def remove_client(self, client: Subscriber) -> None:
        """A consumer left: its in-flight messages stay until they time out
        (docs/protocols/nsq-nsqd.md#disconnect-and-cls)."""
        if client in self.clients:
            self.clients.remove(client)

    def empty(self) -> None:
        """Drop everything waiting, deferred and in flight (docs/protocols/nsq-nsqd.md#pause-empty-delete)."""
        self.next_offset = self.topic.readable_end  # a chunked MPUB in progress comes whole, later
        self.release_all()
        self.requeued.clear()
        self.deferred.clear()
        for _, delivery, _ in self.in_flight.values():
            if delivery.client in self.clients:
                delivery.client.in_flight = 0
        self.in_flight.clear()
        self.deadlines.clear()
        self.attempts.clear()
        self.finished.clear()

    def drop_overflow(self, first_new: int, end: int, limit: int) -> None:
        """An ephemeral channel holds at most ``limit`` waiting messages; like nsqd's memory queue in
        front of a discarding backend, it drops what arrives once it is full (the newest)."""
        waiting_before = self.depth - (end - first_new)
        keep = max(0, limit - waiting_before)
        if first_new + keep < end:
            self.dropped.append((first_new + keep, end))


def _stamp(props: bytes, store_ms: int) -> tuple[int, int]:
    """(nsqd timestamp in ns, due time in ms or 0) of a stored message, from its properties."""
    ts = property_value(props, _TIMESTAMP_KEY)
    defer = int(property_value(props, _DEFER_KEY) or 0) if _DEFER_KEY in props else 0
    return int(ts) if ts else store_ms * 1_000_000, store_ms + defer if defer > 0 else 0


def _refusal(entry: InFlight | None, msg_id: bytes, verb: str) -> str:
    what = "ID not in flight" if entry is None else "client does not own message"
    return f"{verb} {msg_id.decode(errors='replace')} failed {what}"


def _sampled_out(rate: int) -> bool:
    return random.randrange(100) > rate
