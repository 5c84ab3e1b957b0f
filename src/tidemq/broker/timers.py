"""Timer messages with an exact delivery time (RocketMQ 5.x TimerMessageStore semantics;
docs/protocols/rocketmq-messages.md#timer-messages).

A send carrying TIMER_DELIVER_MS (absolute), TIMER_DELAY_SEC or TIMER_DELAY_MS that falls due later is
stored in ``rmq_sys_wheel_timer`` queue 0 with REAL_TOPIC/REAL_QID and TIMER_OUT_MS (its due time, also
its consume-queue tags code); one due now or earlier is stored under its own topic at once. Each stored
timer message is added to the store's ``TimeIndex`` in the same call that stores it, and a walker pops
due entries and stores them again under their real topic, never before their time.

Exactly once across a SIGKILL: each batch of re-puts is written in one store write together with a
checkpoint record (``rmq_sys_wheel_timer`` queue 1, body ``"<due> <ref>"``), so the re-puts and the
claim that they were made survive or vanish together; on start the index adopts the newest such record.
The index's own entries lost with a crash are re-added from the timer queue from the index's
``indexed`` position (see store/timer_index.py).

Cancellation (Java TimerMessageStore's delete marker): a send carrying TIMER_DEL_UNIQKEY
("<topic>+<uniq key>", or the bare uniq key older 5.x brokers compared) and the same deliver time as the
message it cancels is stored like a timer message, but never delivered; when the walker reaches a
precision slot (``PRECISION_MS``) it first collects the markers indexed in that slot, and a message
whose key one names is skipped. Markers live in the log and the index, so a cancellation survives a
SIGKILL like the message it cancels.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidemq.aio import cancel_and_wait, wait_or_timeout
from tidemq.record import MessageExt, Prop, decode_record
from tidemq.remoting.names import TIMER_TOPIC
from tidemq.store import StoreError, TimeIndex
from tidemq.store.requests import AppendRequest

if TYPE_CHECKING:
    from tidemq.broker.broker import Broker

log = logging.getLogger(__name__)

MESSAGES_QUEUE = 0
CHECKPOINT_QUEUE = 1
#: Bucket size of the time index; precision does not depend on it (a bucket is sorted when read).
BUCKET_MS = 10_000
#: Re-puts per store write (and per checkpoint record).
BATCH = 128
#: A marker cancels a message due in the same slot of this size (Java's timerPrecisionMs default).
PRECISION_MS = 1000
_NOT_A_TIMER = (TIMER_TOPIC,)
#: The properties that make a send a timer message (or a timer cancellation).
TIMER_PROPERTIES = (Prop.TIMER_DELIVER_MS, Prop.TIMER_DELAY_SEC, Prop.TIMER_DELAY_MS, Prop.TIMER_DEL_UNIQKEY)
#: Those of them that say when.
_TIMER_TIMES = frozenset((Prop.TIMER_DELIVER_MS, Prop.TIMER_DELAY_SEC, Prop.TIMER_DELAY_MS))


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True, frozen=True)
class TimerPlan:
    """Where a timer send is stored: ``due_ms`` is its TIMER_OUT_MS and its tags code."""

    due_ms: int


class TimerRejected(Exception):
    """A timer message the broker refuses; the text is the MESSAGE_ILLEGAL remark."""


def recovered_tags_code(props: dict[str, str]) -> int:
    """A timer record's tags code as store recovery must rebuild it: its due time."""
    out = props.get(Prop.TIMER_OUT_MS, "")
    return int(out) if out.lstrip("-").isdigit() else 0


def _parse(props: dict[str, str], key: str) -> int:
    text = props[key]
    try:
        return int(text)
    except ValueError:
        raise TimerRejected(f"timer message illegal: {key} {text!r} is not a whole number") from None


class TimerService:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.index = TimeIndex(broker.store.config.data_dir / "timerindex", BUCKET_MS)
        self.delivered_count = 0
        self._wakeup = asyncio.Event()
        self._waiting_until: int | None = None
        self._tasks: list[asyncio.Task[None]] = []
        #: Batches stored but maybe not yet fsynced: (log end offset, last entry), oldest first.
        self._unflushed: deque[tuple[int, tuple[int, int]]] = deque()
        #: The delete keys of the markers of a precision slot, read when the walker first reaches it.
        self._cancels: dict[int, set[str]] = {}
        self.cancelled_count = 0

    # --- the send path ------------------------------------------------------------------------------

    def plan(self, props: dict[str, str], topic: str) -> TimerPlan | None:
        """Decide a send's timer (Java HookUtils.transformTimerMessage): None stores it as it is.
        Raises TimerRejected for a bad time or one beyond ``--timer-max-delay``."""
        if topic in _NOT_A_TIMER or Prop.TIMER_OUT_MS in props:
            return None  # already through the timer (a re-put, or a copy of one)
        cancelling = Prop.TIMER_DEL_UNIQKEY in props
        if props.get(Prop.DELAY, "0") not in ("", "0"):
            # As Java: a delay level wins, and the timer properties are dropped.
            for key in _TIMER_TIMES:
                props.pop(key, None)
            return None
        if props.keys().isdisjoint(_TIMER_TIMES):  # a plain send: not even the clock is read
            return None
        now = now_ms()
        if Prop.TIMER_DELAY_SEC in props:
            due = now + _parse(props, Prop.TIMER_DELAY_SEC) * 1000
        elif Prop.TIMER_DELAY_MS in props:
            due = now + _parse(props, Prop.TIMER_DELAY_MS)
        else:
            due = _parse(props, Prop.TIMER_DELIVER_MS)
        max_ms = self.broker.config.timer_max_delay_s * 1000
        if due - now > max_ms:
            raise TimerRejected(
                f"timer message illegal: it is due in {due - now} ms, beyond the maximum delay of {max_ms} ms"
            )
        # Due now, or at or before what the walker has already passed: deliver at once (never late-add).
        if due <= max(now, self.index.popped_through[0]):
            if cancelling:
                raise TimerRejected(
                    "timer message illegal: a cancellation (TIMER_DEL_UNIQKEY) must carry the future deliver "
                    "time of the message it cancels"
                )
            return None
        if cancelling:
            self._cancels.pop(due // PRECISION_MS, None)  # re-read from the index once it holds the marker
        props[Prop.TIMER_OUT_MS] = str(due)
        props[Prop.TIMER_ENQUEUE_MS] = str(now)
        return TimerPlan(due)

    def on_dispatch(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        """Index a timer message in the same call that stores it."""
        if topic != TIMER_TOPIC or queue_id != MESSAGES_QUEUE:
            return
        cq = self.broker.store.find_queue(TIMER_TOPIC, MESSAGES_QUEUE)
        entry = cq.entry(max_offset - 1) if cq is not None else None
        if entry is None:
            return
        self.index.add(tags_code, entry[0], max_offset)
        if self._waiting_until is None or tags_code < self._waiting_until:
            self._wakeup.set()

    # --- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        self._recover()
        self._tasks = [asyncio.create_task(self._walk()), asyncio.create_task(self._flush_loop())]

    async def close(self) -> None:
        """Called before the store closes (and fsyncs its log), so batches not yet known to be fsynced stay
        uncommitted in the index: the log's checkpoint records cover them on the next start."""
        await cancel_and_wait(self._tasks)
        self._commit_flushed()
        self.index.close()

    def _commit_flushed(self) -> None:
        """Commit to the index the batches the log has fsynced: its checkpoint file then never claims a
        re-put a machine crash could still take back."""
        flushed = self.broker.store.commitlog.flushed
        while self._unflushed and self._unflushed[0][0] <= flushed:
            self.index.commit(self._unflushed.popleft()[1])

    def _recover(self) -> None:
        store = self.broker.store
        marker_cq = store.find_queue(TIMER_TOPIC, CHECKPOINT_QUEUE)
        if marker_cq is not None and marker_cq.max_offset > marker_cq.min_offset:
            entry = marker_cq.entry(marker_cq.max_offset - 1)
            data = store.read_message(entry[0]) if entry is not None else None
            if data is not None:
                due, _, ref = decode_record(data, decompress=False).body.decode().partition(" ")
                self.index.restore_delivered((int(due), int(ref)))
        cq = store.find_queue(TIMER_TOPIC, MESSAGES_QUEUE)
        readded = 0
        if cq is not None:
            for qoff in range(max(self.index.indexed, cq.min_offset), cq.max_offset):
                entry = cq.entry(qoff)
                if entry is not None and self.index.add_missing(entry[2], entry[0], qoff + 1):
                    readded += 1
        self.index.flush()
        log.info(
            "timers: delivered through %s, %d entries re-indexed, %d buckets pending",
            self.index.delivered,
            readded,
            self.index.pending_buckets(),
        )

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.broker.store.config.cq_flush_interval_ms / 1000)
            self._commit_flushed()
            try:
                self.index.flush()
            except OSError as exc:
                log.error("timers: flushing the time index failed: %s", exc)

    # --- delivery -----------------------------------------------------------------------------------

    async def _walk(self) -> None:
        while True:
            now = now_ms()
            entries = self.index.pop_due(now, BATCH)
            if not entries:
                nxt = self.index.next_due(now)
                self._waiting_until = nxt
                wait_s = 1.0 if nxt is None else min(max(nxt - now, 1) / 1000, 1.0)
                self._wakeup.clear()
                await wait_or_timeout(self._wakeup, wait_s)
                self._waiting_until = None
                continue
            if not self._deliver(entries):
                self.index.push_back(entries)
                await asyncio.sleep(0.1)

    def _deliver(self, entries: list[tuple[int, int]]) -> bool:
        """Store a batch under its real topics with its checkpoint record, in one write."""
        requests = [r for due, ref in entries if (r := self._re_put(due, ref)) is not None]
        last_due, last_ref = entries[-1]
        requests.append(
            self.broker.make_append(
                topic=TIMER_TOPIC,
                queue_id=CHECKPOINT_QUEUE,
                body=f"{last_due} {last_ref}".encode(),
                flag=0,
                properties={},
                sys_flag=0,
                born_timestamp=now_ms(),
                born_host=self.broker.store_host,
                schedule=False,
            )
        )
        try:
            result = self.broker.store.put(requests)
        except StoreError as exc:
            log.error("timers: cannot deliver %d due messages: %s", len(entries), exc)
            return False
        self._unflushed.append((result.end_offset, entries[-1]))
        self.delivered_count += len(requests) - 1
        return True

    def _re_put(self, due: int, ref: int) -> AppendRequest | None:
        msg = self._read_timer(ref)
        if msg is None:
            log.warning("timers: timer message at %d (due %d) is gone, skipping it", ref, due)
            return None
        props = dict(msg.properties)
        if Prop.TIMER_DEL_UNIQKEY in props:
            return None  # a marker is never delivered
        real_topic = props.pop(Prop.REAL_TOPIC, None)
        real_qid = props.pop(Prop.REAL_QID, "")
        if real_topic is None or not real_qid.isdigit():
            log.warning("timers: record at %d has no REAL_TOPIC/REAL_QID, skipping it", ref)
            return None
        uniq = props.get(Prop.UNIQ_KEY)
        if uniq is not None and self._cancels_of(due) & {f"{real_topic}+{uniq}", uniq}:
            log.info("timers: %s on %s (due %d) was cancelled", uniq, real_topic, due)
            self.cancelled_count += 1
            return None
        props[Prop.TIMER_DEQUEUE_MS] = str(now_ms())
        return self.broker.make_append_again(
            msg,
            topic=real_topic,
            queue_id=int(real_qid),
            properties=props,
            reconsume_times=msg.reconsume_times,
            schedule=False,
        )

    def _read_timer(self, ref: int) -> MessageExt | None:
        data = self.broker.store.read_message(ref)
        msg = decode_record(data, decompress=False) if data is not None else None
        return msg if msg is not None and msg.topic == TIMER_TOPIC else None

    def _cancels_of(self, due: int) -> set[str]:
        """The delete keys of the markers indexed in ``due``'s slot (older slots are forgotten)."""
        slot = due // PRECISION_MS
        keys = self._cancels.get(slot)
        if keys is None:
            for old in [s for s in self._cancels if s < slot]:
                del self._cancels[old]
            keys = set()
            for _, ref in self.index.entries_between(slot * PRECISION_MS, (slot + 1) * PRECISION_MS - 1):
                marker = self._read_timer(ref)
                key = marker.properties.get(Prop.TIMER_DEL_UNIQKEY) if marker is not None else None
                if key:
                    keys.add(key)
            self._cancels[slot] = keys
        return keys
