"""What the message store takes and answers: an append request, a put's and a get's result, the get
status (Java's GetMessageStatus names) and the store's refusal. Front-ends build and read these without
needing the store's machinery (store/message_store.py)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from tidemq.record import Prop, tag_hash

TagsCodeFn = Callable[[str, int, dict[str, str], int], int]


class StoreError(Exception):
    """The store cannot take the write (disk full, closed); nothing of it was acknowledged."""


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True)
class AppendRequest:
    """One record to append; its queue and commit-log offsets are patched in by the store."""

    record: bytearray
    topic: str
    queue_id: int
    tags_code: int
    keys: list[str] = field(default_factory=list)


@dataclass(slots=True)
class PutResult:
    commit_log_offsets: list[int]
    queue_offsets: list[int]
    end_offset: int


@dataclass(slots=True)
class GetResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    #: The records found, back to back (as a pull answer's body carries them), and how many.
    records: bytes = b""
    count: int = 0


def record_keys(props: dict[str, str]) -> list[str]:
    """The keys a record is indexed under: its KEYS (space-separated), then its UNIQ_KEY."""
    keys = props.get(Prop.KEYS, "").split()
    uniq = props.get(Prop.UNIQ_KEY)
    if uniq:
        keys.append(uniq)
    return keys


def default_tags_code(topic: str, queue_id: int, props: dict[str, str], store_ts: int) -> int:
    return tag_hash(props.get(Prop.TAGS))
