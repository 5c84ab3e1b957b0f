"""fastjson-compatible JSON (docs/protocols/rocketmq-remoting.md#fastjson): read bare numeric keys and object
keys, write object keys.

Java's fastjson writes ``Map<Long, …>`` keys unquoted and ``Map<MessageQueue, …>`` keys as JSON objects;
standard parsers reject both. Reading tries orjson first and falls back to a small lenient parser.
"""

from __future__ import annotations

from typing import Any

import orjson

ObjectKey = tuple[tuple[str, Any], ...]

#: Nesting limit of the fallback parser (recursive); real fastjson bodies nest a handful of levels.
MAX_DEPTH = 256


class LenientJSONError(ValueError):
    pass


def object_key(**fields: Any) -> ObjectKey:
    """A hashable stand-in for a JSON object used as a map key."""
    return tuple(sorted(fields.items()))


def loads(data: bytes | str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        text = data.decode() if isinstance(data, bytes | bytearray) else data
        parser = _Parser(text)
        value = parser.value()
        parser.skip_ws()
        if parser.pos != len(text):
            raise LenientJSONError(f"trailing data at {parser.pos}") from None
        return value


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.depth = 0

    def skip_ws(self) -> None:
        text, pos = self.text, self.pos
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        self.pos = pos

    def fail(self, what: str) -> LenientJSONError:
        return LenientJSONError(f"{what} at position {self.pos}")

    def value(self) -> Any:
        self.skip_ws()
        if self.pos >= len(self.text):
            raise self.fail("unexpected end")
        ch = self.text[self.pos]
        if ch in "{[":
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise self.fail("nesting too deep")
            try:
                return self.obj() if ch == "{" else self.arr()
            finally:
                self.depth -= 1
        if ch == '"':
            return self.string()
        return self.scalar()

    def obj(self) -> dict[Any, Any]:
        self.pos += 1
        out: dict[Any, Any] = {}
        self.skip_ws()
        if self.text.startswith("}", self.pos):
            self.pos += 1
            return out
        while True:
            self.skip_ws()
            key = self.value()
            if isinstance(key, dict):
                try:
                    key = object_key(**key)
                    hash(key)
                except TypeError:  # non-string field names, or list/object field values
                    raise self.fail("object key is not a flat object") from None
            elif isinstance(key, list):
                raise self.fail("array used as object key")
            self.skip_ws()
            if not self.text.startswith(":", self.pos):
                raise self.fail("expected ':'")
            self.pos += 1
            out[key] = self.value()
            self.skip_ws()
            if self.text.startswith(",", self.pos):
                self.pos += 1
            elif self.text.startswith("}", self.pos):
                self.pos += 1
                return out
            else:
                raise self.fail("expected ',' or '}'")

    def arr(self) -> list[Any]:
        self.pos += 1
        out: list[Any] = []
        self.skip_ws()
        if self.text.startswith("]", self.pos):
            self.pos += 1
            return out
        while True:
            out.append(self.value())
            self.skip_ws()
            if self.text.startswith(",", self.pos):
                self.pos += 1
            elif self.text.startswith("]", self.pos):
                self.pos += 1
                return out
            else:
                raise self.fail("expected ',' or ']'")

    def string(self) -> str:
        start = self.pos
        pos = start + 1
        text = self.text
        while pos < len(text):
            ch = text[pos]
            if ch == "\\":
                pos += 2
                continue
            if ch == '"':
                self.pos = pos + 1
                try:
                    result: str = orjson.loads(text[start : pos + 1])
                except orjson.JSONDecodeError:
                    raise self.fail("bad string") from None
                return result
            pos += 1
        raise self.fail("unterminated string")

    def scalar(self) -> Any:
        start = self.pos
        text = self.text
        pos = start
        while pos < len(text) and text[pos] not in ",:}] \t\r\n":
            pos += 1
        token = text[start:pos]
        self.pos = pos
        if token in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[token]
        try:
            return int(token)
        except ValueError:
            try:
                return float(token)
            except ValueError:
                raise self.fail(f"bad token {token!r}") from None


def dumps_object_keys(value: Any) -> bytes:
    """Serialise like fastjson: an ``ObjectKey`` dict key is written as a JSON object."""
    return _dump(value).encode()


def _dump(value: Any) -> str:
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            if isinstance(key, tuple):
                key_text = _dump(dict(key))
            elif isinstance(key, str):
                key_text = orjson.dumps(key).decode()
            else:
                key_text = orjson.dumps(str(key)).decode()
            items.append(f"{key_text}:{_dump(item)}")
        return "{" + ",".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_dump(v) for v in value) + "]"
    return orjson.dumps(value).decode()
