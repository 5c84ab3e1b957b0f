"""RocketMQ 5.x topic attributes: ``message.type`` (and the other 5.x topic attributes) as
UPDATE_AND_CREATE_TOPIC's ``attributes`` ext field carries them and ``topics.json`` stores them.

The request names changes, ``+key=value`` to add or alter and ``-key`` to delete, comma-separated; a new
topic may only add. The stored form is the resulting plain map (``{"message.type": "FIFO"}``), as the 5.x
broker writes it, so a 5.x tool reading tidemq's topic table sees its own shape. The gRPC endpoint reads the
message type to fill routes' ``accept_message_types`` and to refuse a send of another type; remoting sends
are not checked (the 5.x broker leaves that check to its proxy).
"""

from __future__ import annotations

from dataclasses import dataclass

MESSAGE_TYPE = "message.type"
UNSPECIFIED = "UNSPECIFIED"
NORMAL = "NORMAL"
FIFO = "FIFO"
DELAY = "DELAY"
TRANSACTION = "TRANSACTION"
MIXED = "MIXED"
#: The values the 5.x broker accepts for ``message.type``.
MESSAGE_TYPES = frozenset({UNSPECIFIED, NORMAL, FIFO, DELAY, TRANSACTION, MIXED})


class AttributeProblem(ValueError):
    """A malformed or refused attribute change; its text is the remark the request is answered with."""


@dataclass(frozen=True, slots=True)
class _Attribute:
    changeable: bool
    #: The allowed values, or None for a free-form one.
    values: frozenset[str] | None


#: Every topic attribute a 5.x broker knows (TopicAttributes.ALL); others are refused.
TOPIC_ATTRIBUTES: dict[str, _Attribute] = {
    MESSAGE_TYPE: _Attribute(True, MESSAGE_TYPES),
    "queue.type": _Attribute(False, frozenset({"BatchCQ", "SimpleCQ"})),
    "cleanup.policy": _Attribute(False, frozenset({"DELETE", "COMPACTION"})),
}


def parse_changes(text: str | None) -> dict[str, str]:
    """``+a=1,-b`` -> ``{"+a": "1", "-b": ""}``: the signs stay, so a creation can refuse deletions."""
    if not text:
        return {}
    changes: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and key.startswith("+") and value and "=" not in value:
            changes[key] = value
        elif not sep and key.startswith("-") and len(key) > 1:
            changes[key] = ""
        else:
            raise AttributeProblem(f"add/alter attribute format is wrong: {item}")
    return changes


def apply_changes(current: dict[str, str] | None, changes: dict[str, str]) -> dict[str, str]:
    """The attributes after ``changes``; ``current`` is None for a topic being created."""
    creating = current is None
    result = dict(current or {})
    seen: set[str] = set()
    for signed, value in changes.items():
        key = signed[1:]
        spec = TOPIC_ATTRIBUTES.get(key)
        if spec is None:
            raise AttributeProblem(f"unsupported key: {key}")
        if key in seen:
            raise AttributeProblem(f"alter duplication key. key: {key}")
        seen.add(key)
        if signed.startswith("-"):
            if creating:
                raise AttributeProblem(f"only add attribute is supported while creating topic. key: {key}")
            if key not in result:
                raise AttributeProblem(f"attempt to delete a nonexistent key: {key}")
            if not spec.changeable:
                raise AttributeProblem(f"attempt to update an unchangeable attribute. key: {key}")
            del result[key]
            continue
        if not creating and not spec.changeable:
            raise AttributeProblem(f"attempt to update an unchangeable attribute. key: {key}")
        if spec.values is not None and value not in spec.values:
            raise AttributeProblem(f"value is not in set: {sorted(spec.values)}")
        result[key] = value
    return result


def message_type(attributes: dict[str, str]) -> str | None:
    """The topic's 5.x message type, or None when it has none (tidemq then accepts every type: its topics
    predate the attribute and are shared with 4.x and NSQ clients)."""
    return attributes.get(MESSAGE_TYPE)
