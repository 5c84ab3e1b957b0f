"""A record's properties: the keys this code knows, their text codec and the tags hash
(docs/protocols/rocketmq-messages.md#stored-record).

Properties are ``key\\x01value`` pairs joined by ``\\x02``. Each key is named here once, as text; the
byte form a fast scan searches for is derived from it (``key_prefix``), never spelled again.
"""

from __future__ import annotations

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


class Prop:
    """Property keys of MessageConst that this code reads or writes."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT = "WAIT"
    DELAY = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QID = "REAL_QID"
    TRAN_MSG = "TRAN_MSG"
    PGROUP = "PGROUP"
    TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    UNIQ_KEY = "UNIQ_KEY"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    RECONSUME_TIME = "RECONSUME_TIME"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    CONSUME_START_TIME = "CONSUME_START_TIME"
    CLUSTER = "CLUSTER"
    #: Request-reply (docs/protocols/rocketmq-request-reply.md): the request's id, the requester's client
    #: id, the request timeout in ms, the "reply" message type, and when the broker pushed the reply.
    CORRELATION_ID = "CORRELATION_ID"
    REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
    TTL = "TTL"
    MSG_TYPE = "MSG_TYPE"
    PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
    REPLY_MESSAGE_ARRIVE_TIME = "ARRIVE_TIME"
    #: Timer messages (RocketMQ 5.x): when to deliver, as an absolute time or a delay from the send.
    TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
    TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
    TIMER_DELAY_MS = "TIMER_DELAY_MS"
    #: Set by the broker: the due time it scheduled, when the message entered and left the timer.
    TIMER_OUT_MS = "TIMER_OUT_MS"
    TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
    TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
    TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
    TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"


def key_prefix(key: str) -> bytes:
    """How a pair for ``key`` starts in encoded properties, as bytes: what a scan of raw properties
    searches for (``property_value``)."""
    return (key + NAME_VALUE_SEPARATOR).encode()


def decode_properties(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    props: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        key, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep and key and value:
            props[key] = value
    return props


def encode_properties(props: dict[str, str]) -> str:
    if len(props) == 1:  # nsqd's PUB, its timestamp alone: the hot case, without the generator
        ((k, v),) = props.items()
        return f"{k}{NAME_VALUE_SEPARATOR}{v}" if v is not None and k else ""
    return PROPERTY_SEPARATOR.join(
        f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items() if v is not None and k
    )


def tag_hash(tag: str | None) -> int:
    """Java ``String.hashCode`` over UTF-16 code units, as a signed 32-bit int (0 for no tag): the tags
    code a consume queue keeps for each record."""
    if not tag:
        return 0
    h = 0
    units = tag.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h
