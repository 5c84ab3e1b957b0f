"""Batches of messages: as a producer packs them (docs/protocols/rocketmq-messages.md#batches), and as the
store takes them (``StoredBatch``).

The producer's batch body (the body of SEND_BATCH_MESSAGE) lives here rather than in ``remoting``: it is
a message layout, a cut-down record per message (total, magic, body CRC, flag, body, properties), that
the broker turns into stored records byte for byte (``_fast.build_stored_batch``) without decoding it.
``remoting`` carries it as an opaque body, as it carries the stored records of a pull response.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from tidemq.record.layout import PROPERTIES_LENGTH, MessageDecodeError

#: A batch item's fields before its body: total size, magic, body CRC, flag, body length.
BATCH_ITEM_HEAD = struct.Struct(">iiiii")
#: An item's size beyond its body and properties: the head and the properties length.
ITEM_OVERHEAD = BATCH_ITEM_HEAD.size + PROPERTIES_LENGTH.size
_pack_head, _pack_length = BATCH_ITEM_HEAD.pack, PROPERTIES_LENGTH.pack


@dataclass(slots=True)
class BatchItem:
    flag: int
    body: bytes
    properties: str


def encode_batch(items: list[BatchItem]) -> bytes:
    """The SEND_BATCH_MESSAGE body: each message as total, magic, CRC, flag, body, properties."""
    parts: list[bytes] = []
    for item in items:
        add_item(parts, item.flag, item.body, item.properties)
    return b"".join(parts)


def add_item(parts: list[bytes], flag: int, body: bytes, properties: str) -> int:
    """One item's pieces appended to ``parts`` (joined, they are a batch body); returns the item's size.
    For a producer that gathers messages one at a time: no BatchItem per message to build and walk
    again."""
    props = properties.encode()
    size = ITEM_OVERHEAD + len(body) + len(props)
    parts += (_pack_head(size, 0, 0, flag, len(body)), body, _pack_length(len(props)), props)
    return size


def decode_batch(buf: bytes | bytearray | memoryview) -> list[BatchItem]:
    items = []
    view = memoryview(buf)
    pos = 0
    while pos < len(view):
        flag, body_at, body_len, props_at, props_len, total = _item_bounds(view, pos)
        props = bytes(view[props_at : props_at + props_len])
        try:
            text = props.decode()
        except UnicodeDecodeError as exc:
            raise MessageDecodeError(f"batch record at {pos} has undecodable properties: {exc}") from None
        items.append(BatchItem(flag, bytes(view[body_at : body_at + body_len]), text))
        pos += total
    return items


def _item_bounds(view: memoryview, pos: int) -> tuple[int, int, int, int, int, int]:
    """(flag, body start, body length, properties start, properties length, item size) at ``pos``."""
    if pos + ITEM_OVERHEAD > len(view):
        raise MessageDecodeError(f"batch record at {pos} is truncated")
    total, _magic, _crc, flag, body_len = BATCH_ITEM_HEAD.unpack_from(view, pos)
    if total < ITEM_OVERHEAD or pos + total > len(view) or body_len < 0 or ITEM_OVERHEAD + body_len > total:
        raise MessageDecodeError(f"batch record at {pos} has inconsistent sizes")
    props_at = pos + ITEM_OVERHEAD + body_len
    (props_len,) = PROPERTIES_LENGTH.unpack_from(view, props_at - PROPERTIES_LENGTH.size)
    if props_len < 0 or props_at + props_len != pos + total:
        raise MessageDecodeError(f"batch record at {pos} has a bad properties length")
    return flag, pos + BATCH_ITEM_HEAD.size, body_len, props_at, props_len, total


@dataclass(slots=True)
class StoredBatch:
    """Stored records laid back to back, for one queue: the store's input; offsets are patched in by the
    store. Built by ``build_stored_batch`` (a producer's batch) or ``build_uniform_batch`` (nsqd)."""

    data: bytearray
    sizes: list[int]
    tags_codes: list[int]
    #: Per record, the keys to index (KEYS split on spaces, then UNIQ_KEY), as UTF-8.
    keys: list[list[bytes]] = field(default_factory=list)
    #: The index's hashes of ``keys`` when worked out ahead, off the store write (a big batch, in steps).
    key_hashes: list[list[int]] | None = None
