"""A big SEND_BATCH_MESSAGE encoded in steps that give the event loop back (issue 23, finding 2).

Encoding the stored records of a 4 MiB batch of tiny messages (about 168,000) takes most of a second;
done in one go it froze every other client. The batch body is cut at message boundaries into slices of
STEP_MESSAGES, each encoded with a yield after it, and the whole batch is still stored in ONE store write:
all or nothing, and nothing for a crash to tear, as before. The keys' index hashes are worked out in
the steps too, leaving the write only what needs the record's offset.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from tidemq.record import StoredBatch, build_stored_batch, offset_msg_ids
from tidemq.record.batch import BATCH_ITEM_HEAD, ITEM_OVERHEAD
from tidemq.store.key_index import key_hashes

#: Messages encoded between yields: about 8 ms of work for tiny messages on a slow 2-core VM.
STEP_MESSAGES = 1024
#: Bodies smaller than this are encoded in one go (at most about 2,600 messages of one byte).
STEP_BODY_BYTES = 64 * 1024


def slices(body: bytes) -> Iterator[tuple[int, int]]:
    """[start, end) of consecutive runs of STEP_MESSAGES batch items. A malformed size ends the walk: the
    rest is one slice, for ``build_stored_batch`` to refuse with its reason."""
    start = pos = count = 0
    end = len(body)
    unpack = BATCH_ITEM_HEAD.unpack_from
    while pos < end:
        if pos + ITEM_OVERHEAD > end:
            break
        total = unpack(body, pos)[0]
        if total < ITEM_OVERHEAD or pos + total > end:
            break
        pos += total
        count += 1
        if count == STEP_MESSAGES:
            yield start, pos
            start, count = pos, 0
    if start < end:
        yield start, end


async def build_in_steps(body: bytes, **fields: Any) -> StoredBatch:
    """``build_stored_batch(body, **fields)``, one slice at a time with a yield after each (raises its
    MessageDecodeError on a malformed body)."""
    whole = StoredBatch(bytearray(), [], [], [], [])
    assert whole.key_hashes is not None
    for start, end in slices(body):
        part = build_stored_batch(body[start:end], **fields)
        whole.data += part.data
        whole.sizes += part.sizes
        whole.tags_codes += part.tags_codes
        whole.keys += part.keys
        whole.key_hashes += key_hashes(fields["topic"], part.keys)  # off the one store write
        await asyncio.sleep(0)
    return whole


async def offset_ids_in_steps(store_host: bytes, offsets: list[int]) -> str:
    """The send response's comma-joined msgId of a big batch (5 MB of text for 168,000 messages), made
    a slice at a time with a yield after each."""
    parts = []
    for start in range(0, len(offsets), 4 * STEP_MESSAGES):
        parts.append(offset_msg_ids(store_host, offsets[start : start + 4 * STEP_MESSAGES]))
        await asyncio.sleep(0)
    return ",".join(parts)
