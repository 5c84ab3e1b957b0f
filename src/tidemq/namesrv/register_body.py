"""RegisterBrokerBody, as a broker sends it with REGISTER_BROKER: JSON, or Java's zlib-compressed binary form.

A body of the wrong shape (a list where the topic table belongs, a queue count that is no number, a
compressed body cut short) is refused with a BodyError naming the field, which the transport answers
SYSTEM_ERROR with that remark, as Java's name server answers a body fastjson cannot decode.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

from tidemq.namesrv.route_info import TopicDefinition
from tidemq.remoting.bodies import BodyError, integer, json_object, object_field, text

WHAT = "register broker"
COMPRESSED = "compressed register broker"


def parse_register_body(body: bytes, compressed: bool) -> tuple[dict[str, Any], list[TopicDefinition]]:
    """``(dataVersion, topics)`` from a RegisterBrokerBody; BodyError when it is not one."""
    if not body:
        return {}, []
    if compressed:
        try:
            raw = zlib.decompress(body)
        except zlib.error:
            raise BodyError(f"bad {COMPRESSED} body: not zlib data") from None
        return _parse_compressed(raw)
    doc = json_object(body, WHAT)
    wrapper = object_field(doc, "topicConfigSerializeWrapper", WHAT)
    table = object_field(wrapper, "topicConfigTable", WHAT)
    topics = []
    for name, cfg in table.items():
        if not isinstance(cfg, dict):
            raise BodyError(f"bad {WHAT} body: topicConfigTable[{name[:80]!r}] is not an object")
        topics.append(_topic(cfg, name))
    return object_field(wrapper, "dataVersion", WHAT), topics


def _topic(cfg: dict[str, Any], name: str) -> TopicDefinition:
    return TopicDefinition(
        text(cfg, "topicName", WHAT, name),
        integer(cfg, "readQueueNums", WHAT, 16),
        integer(cfg, "writeQueueNums", WHAT, 16),
        integer(cfg, "perm", WHAT, 6),
        integer(cfg, "topicSysFlag", WHAT, 0),
    )


def _parse_compressed(raw: bytes) -> tuple[dict[str, Any], list[TopicDefinition]]:
    """Java's RegisterBrokerBody.encode(true): the data version's JSON, then each topic config's
    ``name read write perm ...`` text, every part length-prefixed."""
    pos = 0

    def number() -> int:
        nonlocal pos
        if pos + 4 > len(raw):
            raise BodyError(f"bad {COMPRESSED} body: cut short at byte {pos}")
        (value,) = struct.unpack_from(">i", raw, pos)
        pos += 4
        return int(value)

    def chunk() -> bytes:
        nonlocal pos
        length = number()
        if length < 0 or pos + length > len(raw):
            raise BodyError(f"bad {COMPRESSED} body: a part of {length} bytes runs past the end")
        data = raw[pos : pos + length]
        pos += length
        return data

    data_version = json_object(chunk(), f"{COMPRESSED} dataVersion")
    topics = []
    for _ in range(number()):
        fields = chunk().decode(errors="replace").split(" ")
        if len(fields) < 4:
            raise BodyError(f"bad {COMPRESSED} body: a topic config has {len(fields)} fields, expected 4")
        cfg = dict(zip(("topicName", "readQueueNums", "writeQueueNums", "perm"), fields, strict=False))
        topics.append(_topic(cfg, fields[0]))
    return data_version, topics
