"""Checking what a form or URL names before any call is made, so a bad value gets the form back with a
reason rather than a broker error."""

from __future__ import annotations

from datetime import datetime

from tidemq.remoting import names

MAX_QUEUES = 1024


class FormError(ValueError):
    """A form value the console refuses; the message names the field and the problem."""


def name(value: str, what: str) -> str:
    value = value.strip()
    if not value:
        raise FormError(f"the {what} name is blank")
    if len(value) > names.MAX_TOPIC_LENGTH:
        raise FormError(f"the {what} name is longer than {names.MAX_TOPIC_LENGTH} characters")
    if not names.well_formed_name(value):
        raise FormError(f"the {what} name {value!r} may hold only letters, digits, %, |, _ and -")
    return value


def queue_count(value: str) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise FormError(f"the queue count {value!r} is not a whole number") from None
    if not 1 <= n <= MAX_QUEUES:
        raise FormError(f"the queue count must be between 1 and {MAX_QUEUES}, not {n}")
    return n


def timestamp_ms(value: str, what: str = "time") -> int:
    """A ``datetime-local`` input (YYYY-MM-DDTHH:MM[:SS], local time) or epoch milliseconds."""
    text = value.strip()
    if text.isdigit():
        return int(text)
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise FormError(f"the {what} {value!r} is not a date and time (YYYY-MM-DDTHH:MM)") from None


def is_system_topic(topic: str) -> bool:
    """The broker's own topics, which the topic list leaves out unless asked."""
    return (
        topic
        in {
            names.AUTO_CREATE_TOPIC_KEY,
            names.SCHEDULE_TOPIC,
            names.TRANS_HALF_TOPIC,
            names.TRANS_OP_HALF_TOPIC,
            "SELF_TEST_TOPIC",
            "OFFSET_MOVED_EVENT",
            "BenchmarkTest",
            "RMQ_SYS_TRACE_TOPIC",
        }
        or topic.startswith(names.SYSTEM_TOPIC_PREFIX)
        or topic.startswith((names.RETRY_PREFIX, names.DLQ_PREFIX))
    )
