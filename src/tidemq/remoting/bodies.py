"""Request bodies of the wrong shape, refused with a remark instead of a traceback.

Java decodes a JSON body with ``RemotingSerializable.decode``; when fastjson cannot map it onto the body
class the exception reaches ``NettyRemotingAbstract.processRequestCommand``, which answers SYSTEM_ERROR
with a one-line description. Processors here decode in two steps, parsing and then mapping onto typed
values; both run under :func:`body_shape`, so any failure of the mapping (a list where an object belongs,
a missing required field) becomes one :class:`BodyError` naming the body and the problem.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from tidemq.remoting import jsonx


class BodyError(ValueError):
    """A request body that cannot be read as the body class its request code carries."""


_TYPE_NAMES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def kind(value: Any) -> str:
    """The JSON kind of a decoded value, in the words a remark uses."""
    return _TYPE_NAMES.get(type(value), type(value).__name__)


@contextlib.contextmanager
def body_shape(what: str) -> Iterator[None]:
    """Turn a failure while mapping a decoded body onto typed values into a BodyError about ``what``.

    Wrap only the decoding, never the work done with the result, so a broker defect is not reported as
    the client's bad body.
    """
    try:
        yield
    except BodyError:
        raise
    except KeyError as exc:
        raise BodyError(f"bad {what} body: missing field {exc}") from None
    except (TypeError, AttributeError, ValueError) as exc:
        detail = str(exc) if isinstance(exc, ValueError) else "a field has the wrong type"
        raise BodyError(f"bad {what} body: {detail}") from None


def json_object(body: bytes | bytearray | memoryview, what: str) -> dict[str, Any]:
    """The body parsed as one JSON object (Java's body classes are all objects)."""
    if not body:
        raise BodyError(f"bad {what} body: the body is empty")
    try:
        data = jsonx.loads(bytes(body))
    except ValueError:  # also invalid UTF-8
        raise BodyError(f"bad {what} body: not JSON") from None
    if not isinstance(data, dict):
        raise BodyError(f"bad {what} body: expected an object, got {kind(data)}")
    return data


def objects(data: dict[str, Any], key: str, what: str) -> list[dict[str, Any]]:
    """The array of objects under ``key`` (absent or null: empty)."""
    items = data.get(key)
    if items is None:
        return []
    if not isinstance(items, list):
        raise BodyError(f"bad {what} body: {key} is {kind(items)}, expected an array")
    for item in items:
        if not isinstance(item, dict):
            raise BodyError(f"bad {what} body: {key} holds {kind(item)}, expected objects")
    return items


def object_field(data: dict[str, Any], key: str, what: str) -> dict[str, Any]:
    """The object under ``key`` (absent or null: empty)."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BodyError(f"bad {what} body: {key} is {kind(value)}, expected an object")
    return value


def text(data: dict[str, Any], key: str, what: str, default: str = "") -> str:
    """A string field; numbers and booleans are taken as their text, as fastjson does."""
    value = data.get(key)
    if value is None:
        return default
    if isinstance(value, dict | list):
        raise BodyError(f"bad {what} body: {key} is {kind(value)}, expected a string")
    return str(value)


def required_text(data: dict[str, Any], key: str, what: str) -> str:
    value = text(data, key, what)
    if not value:
        raise BodyError(f"bad {what} body: missing field {key!r}")
    return value


def integer(data: dict[str, Any], key: str, what: str, default: int = 0) -> int:
    """A whole-number field; a string of digits is taken as its number, as fastjson does."""
    value = data.get(key)
    if value is None:
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return int(value.strip())
        raise BodyError(f"bad {what} body: {key} is {value[:40]!r}, expected a number")
    raise BodyError(f"bad {what} body: {key} is {kind(value)}, expected a number")
