"""A big MPUB stored in chunks that give the event loop back in between (issue 23, finding 2).

Storing 1,000,000 one-byte messages in one go held the loop for about two seconds: every other client
of every protocol waited. Here the messages are encoded and stored CHUNK_MESSAGES at a time, with a
yield after each chunk, and the MPUB stays all or nothing:

- while it is in progress its topic has a *hold* at its first offset: channels read only below it, so
  no consumer sees part of it (other publishes to the topic meanwhile wait behind the hold too, and are
  delivered once it ends);
- if a chunk cannot be stored, the chunks already stored become *aborted* ranges of the topic, which
  channels skip as an ephemeral channel skips what it dropped, and which no depth counts; a range is
  forgotten once every channel (or, with none, the topic's backlog) has moved past it, or once retention
  removed it (``Topic.prune_aborted``), so the topic state does not grow with every abort;
- a crash midway must not make a prefix visible after restart: the MPUB is recorded in the topic's
  persisted state (``mpubs``: id -> first offset) before its first chunk, its records carry its id in
  the ``NSQ_MPUB`` property, and at start an MPUB still recorded there is aborted: the records with its
  id are found from its first offset on and skipped.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from tidemq.record import record_bodies
from tidemq.store import GetStatus

if TYPE_CHECKING:
    from tidemq.nsq.nsqd.topic import Topic

log = logging.getLogger(__name__)

#: MPUBs of more messages than this are stored in chunks; a smaller one is one store write (without the
#: chunked path's hold, id property and two state writes), about 30-40 ms at most on a slow 2-core VM.
BIG_MPUB_MESSAGES = 8192
#: Messages stored per chunk: 8-12 ms of encoding and storing for tiny messages on a slow 2-core VM.
CHUNK_MESSAGES = 2048
#: Bytes of bodies per chunk at most, so that chunks of big messages stay as short.
CHUNK_BYTES = 4 * 1024 * 1024
#: The property that tags a chunked MPUB's records with its id.
PROP_MPUB = "NSQ_MPUB"
_SCAN_BATCH = 4096


def is_big(bodies: list[bytes]) -> bool:
    """Whether an MPUB is stored in chunks (a small one is stored in one write, as before)."""
    return len(bodies) > BIG_MPUB_MESSAGES


def new_mpub_id() -> str:
    return os.urandom(8).hex()


def chunks(bodies: list[bytes]) -> Iterator[list[bytes]]:
    """Consecutive slices of at most CHUNK_MESSAGES messages and (past the first message) CHUNK_BYTES."""
    start, total = 0, len(bodies)
    while start < total:
        end, size = start, 0
        limit = min(total, start + CHUNK_MESSAGES)
        while end < limit and (end == start or size + len(bodies[end]) <= CHUNK_BYTES):
            size += len(bodies[end])
            end += 1
        yield bodies[start:end]
        start = end


async def give_way() -> None:
    """Let every other ready callback run before the next chunk."""
    await asyncio.sleep(0)


def merge_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def overlap(ranges: list[tuple[int, int]], start: int, end: int) -> int:
    """How many offsets of ``[start, end)`` the ranges cover (they are merged: no offset counted twice)."""
    return sum(min(e, end) - max(s, start) for s, e in ranges if s < end and e > start)


def abort_torn(topic: Topic, mpub_id: str, first: int) -> int:
    """At start: an MPUB recorded as in progress was torn by a crash; its records (found by its id from
    ``first`` on) become aborted ranges. Returns how many records were hidden."""
    store, store_topic = topic.store, topic.store_topic
    tag = f"{PROP_MPUB}\x01{mpub_id}".encode()
    found: list[tuple[int, int]] = []
    offset, end = first, topic.end_offset
    while offset < end:
        result = store.get(store_topic, 0, offset, _SCAN_BATCH, max_transfer=_SCAN_BATCH)
        if result.status is not GetStatus.FOUND:
            break
        for queue_offset, _ms, _body, props in record_bodies(result.records):
            if tag in props:
                if found and found[-1][1] == queue_offset:
                    found[-1] = (found[-1][0], queue_offset + 1)
                else:
                    found.append((queue_offset, queue_offset + 1))
        offset = result.next_begin_offset
    topic.aborted = merge_ranges(topic.aborted + found)
    hidden = sum(e - s for s, e in found)
    log.warning("nsqd: MPUB %s to %s was cut short by a crash: its %d stored messages are skipped",
                mpub_id, topic.name, hidden)  # fmt: skip
    return hidden
