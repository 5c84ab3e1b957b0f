"""Where each field of a stored record sits, and the struct formats that read and write them
(docs/protocols/rocketmq-messages.md#stored-record).

The one description of the layout: every other module (the codecs here, the commit log, the Spark
source) reads a record through these names, never through bare offsets or format strings.

A record, all integers big-endian and signed (as Java's):

    TOTAL_SIZE i | MAGIC I | BODY_CRC i | QUEUE_ID i | FLAG i | QUEUE_OFFSET q | PHYSICAL_OFFSET q |
    SYSFLAG i | BORN_TIMESTAMP q | BORN_HOST 8/20 | STORE_TIMESTAMP q | STORE_HOST 8/20 |
    RECONSUME_TIMES i | PREPARED_TRANSACTION_OFFSET q | BODY_LENGTH i | BODY |
    TOPIC_LENGTH b | TOPIC | PROPERTIES_LENGTH h | PROPERTIES

A host is an IPv4 address and port (8 bytes) or an IPv6 one (20); the sys flag says which.
"""

from __future__ import annotations

import struct
import zlib
from functools import lru_cache


class MessageDecodeError(ValueError):
    """Bytes that do not hold a well-formed message record."""


#: The magic code of a stored record.
MAGIC_MESSAGE = 0xDAA320A7
#: The magic code of the blank that fills the end of a commit-log segment no record fits in.
MAGIC_BLANK = 0xCBD43194


class SysFlag:
    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_NOT_TYPE = 0x0
    TRANSACTION_PREPARED = 0x4
    TRANSACTION_COMMIT = 0x8
    TRANSACTION_ROLLBACK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20
    COMPRESSION_TYPE_MASK = 0x700

    @staticmethod
    def transaction_value(flag: int) -> int:
        return flag & 0xC


#: Both host-length bits: a record with neither has the IPv4 layout nearly every record has.
HOSTS_V6 = SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6

# --- the fields before the born host: the same place in every record ---------------------------------

POS_TOTAL_SIZE = 0
POS_MAGIC = 4
POS_BODY_CRC = 8
POS_QUEUE_ID = 12
POS_FLAG = 16
POS_QUEUE_OFFSET = 20
POS_PHYSICAL_OFFSET = 28
POS_SYSFLAG = 36
POS_BORN_TIMESTAMP = 40
POS_BORN_HOST = 48

#: Total size, magic, body CRC, queue id, flag, queue offset, physical offset, sys flag, born timestamp.
RECORD_PREFIX = struct.Struct(">iIiiiqqiq")
#: Total size and magic: how a record starts, and all there is of a blank.
SIZE_AND_MAGIC = struct.Struct(">iI")
#: Queue offset then physical offset, at POS_QUEUE_OFFSET: the two fields the store patches on append.
QUEUE_AND_PHYSICAL_OFFSETS = struct.Struct(">qq")

# --- the fields after it, placed by the host sizes ---------------------------------------------------

HOST_V4_SIZE = 8
HOST_V6_SIZE = 20
TIMESTAMP_SIZE = 8
#: Reconsume times, prepared transaction offset, body length: from the end of the store host to the body.
RECORD_SUFFIX = struct.Struct(">iqi")
TOPIC_LENGTH_SIZE = 1
PROPERTIES_LENGTH = struct.Struct(">h")
PROPERTIES_LENGTH_SIZE = PROPERTIES_LENGTH.size
#: A topic is at most this many UTF-8 bytes (its length is one signed byte).
MAX_TOPIC_BYTES = 127
#: Encoded properties are at most this many bytes (their length is a signed 16-bit int).
MAX_PROPERTIES = 32767

#: The record's integer fields read or written one at a time.
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")

#: Every field up to the body of a record with IPv4 born and store hosts (the usual layout).
HEAD_V4 = struct.Struct(">iIiiiqqiq8sq8siqi")
HEAD_SIZE_V4 = HEAD_V4.size
#: The same span, unpacking only total size, magic, queue offset, sys flag, store timestamp and body length.
HEAD_V4_BODY_FIELDS = struct.Struct(">iI12xq8xi16xq20xi")
#: The smallest record: IPv4 hosts, and an empty body, topic and properties.
MIN_RECORD_SIZE = HEAD_SIZE_V4 + TOPIC_LENGTH_SIZE + PROPERTIES_LENGTH_SIZE

#: 127.0.0.1:0 as a host field: the born and store host of a record that has no real one.
LOOPBACK_HOST = b"\x7f\x00\x00\x01\x00\x00\x00\x00"

assert RECORD_PREFIX.size == POS_BORN_HOST
assert HEAD_V4.size == POS_BORN_HOST + 2 * HOST_V4_SIZE + TIMESTAMP_SIZE + RECORD_SUFFIX.size
assert HEAD_V4_BODY_FIELDS.size == HEAD_V4.size


@lru_cache(maxsize=8)
def record_head(born_host_len: int, store_host_len: int) -> struct.Struct:
    """A stored record up to its body: total, magic, CRC, queue id, flag, queue offset, physical offset,
    sys flag, born timestamp, born host, store timestamp, store host, reconsume times, prepared
    transaction offset, body length; hosts are HOST_V4_SIZE or HOST_V6_SIZE bytes."""
    return struct.Struct(f">iIiiiqqiq{born_host_len}sq{store_host_len}siqi")


def host_flags(sys_flag: int, born_host: bytes, store_host: bytes) -> int:
    """``sys_flag`` with its host-length bits set from the hosts: they describe the record's layout, so
    they come from the hosts, never from a sender."""
    sys_flag &= ~HOSTS_V6
    if len(born_host) == HOST_V6_SIZE:
        sys_flag |= SysFlag.BORNHOST_V6
    if len(store_host) == HOST_V6_SIZE:
        sys_flag |= SysFlag.STOREHOST_V6
    return sys_flag


def host_sizes(sys_flag: int) -> tuple[int, int]:
    """(born host size, store host size) of a record with ``sys_flag``."""
    return (
        HOST_V6_SIZE if sys_flag & SysFlag.BORNHOST_V6 else HOST_V4_SIZE,
        HOST_V6_SIZE if sys_flag & SysFlag.STOREHOST_V6 else HOST_V4_SIZE,
    )


def store_timestamp_pos(sys_flag: int) -> int:
    """Where the store timestamp of a record with ``sys_flag`` sits."""
    return POS_BORN_HOST + host_sizes(sys_flag)[0]


def body_length_pos(sys_flag: int) -> int:
    """Where the body length of a record with ``sys_flag`` sits (the body follows it)."""
    born, store = host_sizes(sys_flag)
    return POS_BORN_HOST + born + TIMESTAMP_SIZE + store + RECORD_SUFFIX.size - INT32.size


def body_crc(body: bytes | bytearray | memoryview) -> int:
    """The BODY_CRC field of a record holding ``body`` (CRC-32, kept non-negative as Java does)."""
    return zlib.crc32(body) & 0x7FFFFFFF


def topic_field(topic: str) -> bytes:
    """A record's topic as stored: one length byte, then the UTF-8 name (at most MAX_TOPIC_BYTES)."""
    raw = topic.encode()
    if len(raw) > MAX_TOPIC_BYTES:
        raise MessageDecodeError(f"topic {topic!r} is longer than {MAX_TOPIC_BYTES} bytes")
    return bytes((len(raw),)) + raw


def properties_field(properties: bytes) -> bytes:
    """A record's properties as stored: a 2-byte length, then the encoded properties."""
    if len(properties) > MAX_PROPERTIES:
        raise MessageDecodeError(f"properties are {len(properties)} bytes, over the {MAX_PROPERTIES} limit")
    return PROPERTIES_LENGTH.pack(len(properties)) + properties
