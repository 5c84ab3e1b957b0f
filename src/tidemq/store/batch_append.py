"""A big batch stored in steps that give the event loop back (issue 23, "the event loop never blocks").

Storing a 4 MiB SEND_BATCH of 100,000 tiny messages in one go held the loop about 100 ms, most of it
spent on the queue's 20-byte entries and the key index's entries, both one per message. Here the batch is
stored as Java's broker stores a MessageExtBatch: its records go to the commit log in ONE write (Java's
CommitLog.asyncPutMessages appends the whole batch under the put-message lock), so the log holds all of
it or none of it, and a crash can never tear it; then its consume-queue and key-index entries are written
STEP_ENTRIES at a time with a yield after each, as Java's ReputMessageService dispatches the log record by
record (DefaultMessageStore.ReputMessageService.doReput): a consumer may see the batch grow, as in Java.

While the entries are written the batch *holds* its queue (``QueueHold``): the batch has consecutive
queue offsets and nothing else takes one of them. A write to the held queue meanwhile is stored in the
log at once with the next offset after the batch and acknowledged, but its queue entry (and the pull
wake-up) waits behind the batch's; writes to other queues proceed as usual. Index entries of later
records wait behind the batch's too (KeyIndex slots), so the index stays in log order.

A crash midway: the dispatch checkpoint never passes a held batch's first record, so recovery writes its
missing entries again from the log: after a restart the batch is wholly visible (its records were all in
the log), as a Java broker that died before answering also keeps the batch. A full disk midway: when
nothing has been written behind the batch, the entries written so far and the records are taken back
and the batch is refused (no offset is ever handed out twice); otherwise the records are stored and the
entries are written once there is room again (retried every RETRY_S), the answer waiting for them.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from tidemq.record import StoredBatch
from tidemq.record.layout import POS_QUEUE_OFFSET, QUEUE_AND_PHYSICAL_OFFSETS
from tidemq.store.key_index import KeyIndex, key_hashes
from tidemq.store.requests import PutResult, StoreError

if TYPE_CHECKING:
    from tidemq.store.consume_queue import ConsumeQueue
    from tidemq.store.message_store import MessageStore

log = logging.getLogger(__name__)

#: Queue and index entries written between yields: a few milliseconds for tiny messages.
STEP_ENTRIES = 8192
#: A batch of more messages than this is worth storing in steps (smaller ones take ``put_batch``).
MIN_STEPPED_MESSAGES = 2 * STEP_ENTRIES
#: How often the entries of a batch whose records are stored are tried again on a full disk.
RETRY_S = 0.2


@dataclass(slots=True)
class QueueHold:
    """A queue held by a big batch whose entries are being written: ``next`` is the next queue offset to
    hand out (past the batch), ``log_start`` the batch's first record, ``pending`` the entries of writes
    to the queue meanwhile, written once the batch's are."""

    next: int
    log_start: int
    pending: list[tuple[list[int], list[int], list[int]]] = field(default_factory=list)
    tags: set[int] = field(default_factory=set)
    released: asyncio.Event = field(default_factory=asyncio.Event)

    def defer(self, phys: list[int], sizes: list[int], tags_codes: list[int]) -> None:
        self.pending.append((phys, sizes, tags_codes))
        self.tags.update(tags_codes)
        self.next += len(phys)


def pack_offsets(data: bytearray, sizes: list[int], base: int, first_queue_offset: int) -> list[int]:
    """Write each record's queue and commit-log offsets into ``data`` (records back to back, the first
    at log offset ``base``); returns the records' log offsets."""
    pack = QUEUE_AND_PHYSICAL_OFFSETS.pack_into
    if len(sizes) < 64:  # a PUB, an MPUB or a batch as most send them: the plain loop is quickest
        phys_offsets = []
        at = 0
        for qoff, size in enumerate(sizes, first_queue_offset):
            pack(data, at + POS_QUEUE_OFFSET, qoff, base + at)
            phys_offsets.append(base + at)
            at += size
        return phys_offsets
    # C-level loops: a 4 MiB batch may hold 168,000 tiny messages
    starts = list(itertools.accumulate(sizes[:-1], initial=0))
    phys_offsets = [base + start for start in starts]
    queue_offsets = range(first_queue_offset, first_queue_offset + len(sizes))
    positions = [start + POS_QUEUE_OFFSET for start in starts]
    deque(map(partial(pack, data), positions, queue_offsets, phys_offsets), maxlen=0)
    return phys_offsets


async def put_in_steps(store: MessageStore, topic: str, queue_id: int, batch: StoredBatch) -> PutResult:
    """Store ``batch`` for one queue: its records in one write, its entries in steps (see the module)."""
    key = (topic, queue_id)
    while (other := store.holds.get(key)) is not None:  # another big batch is still entering the queue
        await other.released.wait()
    data, sizes = batch.data, batch.sizes
    seg = store._reserve(len(data))
    cq = store._queue(topic, queue_id)
    first, base = cq.max_offset, seg.end
    phys = pack_offsets(data, sizes, base, first)
    store._write(seg, data)
    hold = QueueHold(first + len(sizes), base)
    store.holds[key] = hold
    # Shielded: a sender that goes away must not leave the queue held with half its entries written.
    await asyncio.shield(asyncio.ensure_future(_enter(store, cq, batch, phys, first, hold)))
    cq.bytes_in += len(data)
    return PutResult(phys, list(range(first, first + len(sizes))), base + len(data))


async def _enter(
    store: MessageStore, cq: ConsumeQueue, batch: StoredBatch, phys: list[int], first: int, hold: QueueHold
) -> None:
    """Write the batch's queue and index entries in steps, then those of the writes held behind it."""
    sizes, tags_codes, count = batch.sizes, batch.tags_codes, len(batch.sizes)
    end = phys[-1] + sizes[-1]
    index = store.index
    slot = index.open_slot(phys[-1]) if index is not None else None
    entered = refused = False
    indexed = 0
    try:
        await asyncio.sleep(0)
        while (done := cq.max_offset - first) < count:
            upto = min(count, done + STEP_ENTRIES)
            try:
                cq.append_many(phys[done:upto], sizes[done:upto], tags_codes[done:upto])
            except OSError as exc:
                if store.commitlog.max_offset == end:  # nothing behind the batch: take it all back
                    refused = True
                    seg = store.commitlog.segment_at(hold.log_start)
                    assert seg is not None
                    store._roll_back(seg, hold.log_start, {cq: first})
                    raise store._write_failure(exc) from None
                await _wait_for_room(store, exc)
                continue
            if slot is not None:
                hashes = batch.key_hashes
                part = (
                    hashes[indexed:upto]
                    if hashes is not None
                    else key_hashes(cq.topic, batch.keys[indexed:upto])
                )
                KeyIndex.fill_slot(slot, part, phys[indexed:upto])
                indexed = upto
            await give_way()
        await _write_pending(store, cq, hold)
        entered = True
    finally:
        if entered or refused or not store._closed:
            if slot is not None and index is not None:
                index.close_slot(slot, discard=refused)
            del store.holds[(cq.topic, cq.queue_id)]
        # else the store shut down midway: the hold stays, so the checkpoint never passes the batch
        hold.released.set()
    for listener in store.dispatch_listeners:
        for tags_code in set(tags_codes) | hold.tags:
            listener(cq.topic, cq.queue_id, cq.max_offset, tags_code)


async def give_way() -> None:
    """Let every other ready callback run before the next step."""
    await asyncio.sleep(0)


async def _write_pending(store: MessageStore, cq: ConsumeQueue, hold: QueueHold) -> None:
    """Write the entries of the records that came for the queue while the batch held it."""
    while hold.pending:
        phys, sizes, tags_codes = hold.pending[0]
        try:
            cq.append_many(phys, sizes, tags_codes)
        except OSError as exc:
            await _wait_for_room(store, exc)
            continue
        hold.pending.pop(0)


async def _wait_for_room(store: MessageStore, exc: OSError) -> None:
    """The records are in the log, so their entries must follow: wait for space (or the shut-down)."""
    if store._closed:
        raise StoreError("store is shut down")
    log.error("store: a stored batch's queue entries wait for room on the disk: %s", exc)
    await asyncio.sleep(RETRY_S)
