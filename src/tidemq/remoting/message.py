"""The stored message layout and everything derived from it (docs/protocols/rocketmq-messages.md).

The broker keeps messages in exactly this layout, so a pull response is a slice of the log.
"""

from __future__ import annotations

import ipaddress
import itertools
import operator
import os
import struct
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
from functools import lru_cache

MAGIC_MESSAGE = 0xDAA320A7
MAGIC_BLANK = 0xCBD43194

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


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
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    UNIQ_KEY = "UNIQ_KEY"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    RECONSUME_TIME = "RECONSUME_TIME"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    CONSUME_START_TIME = "CONSUME_START_TIME"
    CLUSTER = "CLUSTER"


class MessageDecodeError(ValueError):
    """Bytes that do not hold a well-formed message record."""


# Fixed part up to BODYLEN for IPv4 born and store hosts (docs/protocols/rocketmq-messages.md#stored-record).
_V4_HEAD = struct.Struct(">iIiiiqqiq4siq4siiqi")
HEAD_SIZE_V4 = _V4_HEAD.size  # 88
POS_TOTAL_SIZE = 0
POS_MAGIC = 4
POS_BODY_CRC = 8
POS_QUEUE_ID = 12
POS_QUEUE_OFFSET = 20
POS_PHYSICAL_OFFSET = 28
POS_SYSFLAG = 36
POS_BORN_TIMESTAMP = 40
POS_BORN_HOST = 48

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
MAX_PROPERTIES = 32767


def body_crc(body: bytes | bytearray | memoryview) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


def tag_hash(tag: str | None) -> int:
    """Java ``String.hashCode`` over UTF-16 code units, as a signed 32-bit int (0 for no tag)."""
    if not tag:
        return 0
    h = 0
    units = tag.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


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
    return PROPERTY_SEPARATOR.join(
        f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items() if v is not None and k
    )


def compress_body(body: bytes, level: int = 5) -> bytes:
    return zlib.compress(body, level)


def decompress_body(body: bytes) -> bytes:
    return zlib.decompress(body)


# --- hosts and ids --------------------------------------------------------------------------------


def pack_host(host: str, port: int) -> tuple[bytes, bool]:
    """Return (ip bytes + port, is_v6) for a socket address."""
    ip = ipaddress.ip_address(host)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.packed + _I32.pack(port), ip.version == 6


def unpack_host(data: bytes | memoryview) -> str:
    raw = bytes(data)
    ip = ipaddress.ip_address(raw[:-4])
    (port,) = _I32.unpack(raw[-4:])
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def offset_msg_id(store_host: bytes, commit_log_offset: int) -> str:
    """Offset message id (docs/protocols/rocketmq-messages.md#message-ids): store host ip + port + commit-log
    offset as upper-case hex."""
    return f"{store_host.hex().upper()}{commit_log_offset & 0xFFFFFFFFFFFFFFFF:016X}"


def offset_msg_ids(store_host: bytes, commit_log_offsets: Iterable[int]) -> str:
    """Comma-joined offset ids of records one host stored (a send response's msgId for a batch)."""
    host = store_host.hex().upper()
    return ",".join([f"{host}{offset & 0xFFFFFFFFFFFFFFFF:016X}" for offset in commit_log_offsets])


def decode_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """Return ("ip:port", commit-log offset) from an offset message id."""
    if len(msg_id) not in (32, 56):
        raise MessageDecodeError(f"offset message id must be 32 or 56 hex characters: {msg_id!r}")
    try:
        raw = bytes.fromhex(msg_id)
        if len(raw) * 2 != len(msg_id):  # fromhex skips whitespace between bytes
            raise ValueError(msg_id)
    except ValueError:
        raise MessageDecodeError(f"offset message id is not hexadecimal: {msg_id!r}") from None
    (offset,) = _I64.unpack(raw[-8:])
    return unpack_host(raw[:-8]), offset


class UniqueIdGenerator:
    """UNIQ_KEY ids in the Java layout: ip, pid, a per-process hash, ms since month start, counter."""

    def __init__(self, ip: str = "127.0.0.1") -> None:
        addr, _ = pack_host(ip, 0)
        prefix = addr[:-4][-4:] + (os.getpid() & 0x7FFF).to_bytes(2, "big")
        prefix += _I32.pack(hash(os.urandom(8)) & 0x7FFFFFFF)
        self._prefix = prefix.hex().upper()
        self._counter = itertools.count(int.from_bytes(os.urandom(2), "big"))
        self._month_start = 0.0
        self._next_month = 0.0

    def _roll_month(self, now: float) -> None:
        t = time.localtime(now)
        self._month_start = time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1))
        year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
        self._next_month = time.mktime((year, month, 1, 0, 0, 0, 0, 0, -1))

    def _time_part(self) -> str:
        now = time.time()
        if now >= self._next_month:
            self._roll_month(now)
        return f"{self._prefix}{int((now - self._month_start) * 1000) & 0x7FFFFFFF:08X}"

    def next_id(self) -> str:
        return f"{self._time_part()}{next(self._counter) & 0xFFFF:04X}"

    def next_ids(self, count: int) -> list[str]:
        """``count`` ids at once (a batch): the clock is read once for all of them."""
        head, counter = self._time_part(), self._counter
        return [f"{head}{next(counter) & 0xFFFF:04X}" for _ in range(count)]


# --- records ---------------------------------------------------------------------------------------


def encode_record(
    *,
    topic: str,
    queue_id: int,
    body: bytes | bytearray | memoryview,
    properties: str,
    flag: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x00\x00",
    store_timestamp: int = 0,
    store_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x00\x00",
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    queue_offset: int = 0,
    commit_log_offset: int = 0,
) -> bytearray:
    """Build one stored record; the store patches queue and commit-log offsets in place on append."""
    tail = topic_field(topic) + properties_field(properties.encode())
    head = record_head(len(born_host), len(store_host))
    out = bytearray(
        head.pack(
            head.size + len(body) + len(tail), MAGIC_MESSAGE, body_crc(body), queue_id, flag, queue_offset,
            commit_log_offset, host_flags(sys_flag, born_host, store_host), born_timestamp, born_host,
            store_timestamp, store_host, reconsume_times, prepared_transaction_offset, len(body),
        )
    )  # fmt: skip
    out += body
    out += tail
    return out


def topic_field(topic: str) -> bytes:
    """A record's topic as stored: one length byte, then the UTF-8 name (at most 127 bytes)."""
    raw = topic.encode()
    if len(raw) > 127:
        raise MessageDecodeError(f"topic {topic!r} is longer than 127 bytes")
    return bytes((len(raw),)) + raw


def properties_field(properties: bytes) -> bytes:
    """A record's properties as stored: a 2-byte length, then the encoded properties."""
    if len(properties) > MAX_PROPERTIES:
        raise MessageDecodeError(f"properties are {len(properties)} bytes, over the {MAX_PROPERTIES} limit")
    return _I16.pack(len(properties)) + properties


@lru_cache(maxsize=8)
def record_head(born_host_len: int, store_host_len: int) -> struct.Struct:
    """A stored record up to its body: total, magic, CRC, queue id, flag, queue offset, physical offset,
    sys flag, born timestamp, born host, store timestamp, store host, reconsume times, prepared
    transaction offset, body length (docs/protocols/rocketmq-messages.md#stored-record); hosts are 8 bytes
    (IPv4) or 20 (IPv6)."""
    return struct.Struct(f">iIiiiqqiq{born_host_len}sq{store_host_len}siqi")


def host_flags(sys_flag: int, born_host: bytes, store_host: bytes) -> int:
    """``sys_flag`` with its host-length bits set from the hosts: they describe the record's layout, so
    they come from the hosts, never from a sender."""
    sys_flag &= ~(SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6)
    if len(born_host) == 20:
        sys_flag |= SysFlag.BORNHOST_V6
    if len(store_host) == 20:
        sys_flag |= SysFlag.STOREHOST_V6
    return sys_flag


def _host_sizes(sys_flag: int) -> tuple[int, int]:
    return (20 if sys_flag & SysFlag.BORNHOST_V6 else 8), (20 if sys_flag & SysFlag.STOREHOST_V6 else 8)


def store_timestamp_pos(sys_flag: int) -> int:
    return POS_BORN_HOST + _host_sizes(sys_flag)[0]


@dataclass(slots=True)
class MessageExt:
    """A decoded stored message, with the names RocketMQ clients use."""

    topic: str
    body: bytes
    queue_id: int = 0
    queue_offset: int = 0
    commit_log_offset: int = 0
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    store_timestamp: int = 0
    store_host_raw: bytes = b""
    born_host_raw: bytes = b""
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    body_crc: int = 0
    store_size: int = 0
    #: The properties, or their stored text until ``properties`` is first read: a consumer that reads only
    #: bodies skips a decode per message (a tenth of a lite pull consumer's CPU on a drain).
    props: dict[str, str] | str = field(default="", compare=False)
    #: Set by consumers from the queue the message was pulled from; not part of the stored record.
    broker_name: str = ""

    @property
    def properties(self) -> dict[str, str]:
        props = self.props
        if isinstance(props, str):
            props = self.props = decode_properties(props)
        return props

    @properties.setter
    def properties(self, value: dict[str, str]) -> None:
        self.props = value

    def add_properties(self, encoded: str) -> None:
        """Set the properties in ``encoded`` (``encode_properties`` text), decoded or not."""
        if isinstance(self.props, str):
            self.props = f"{self.props}{PROPERTY_SEPARATOR}{encoded}" if self.props else encoded
        else:
            self.props.update(decode_properties(encoded))

    def put_property(self, key: str, value: str) -> None:
        """Set one property, leaving stored text undecoded (the push consumers stamp every message's
        consume start time: decoding each message's properties for it was a sixth of their CPU)."""
        if isinstance(self.props, dict):
            self.props[key] = value
        else:
            self.add_properties(f"{key}{NAME_VALUE_SEPARATOR}{value}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageExt):
            return NotImplemented
        return _compared(self) == _compared(other) and self.properties == other.properties

    @property
    def born_host(self) -> str:
        return unpack_host(self.born_host_raw) if self.born_host_raw else ""

    @property
    def store_host(self) -> str:
        return unpack_host(self.store_host_raw) if self.store_host_raw else ""

    @property
    def tags(self) -> str | None:
        return self.properties.get(Prop.TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(Prop.KEYS)

    @property
    def offset_msg_id(self) -> str:
        return offset_msg_id(self.store_host_raw, self.commit_log_offset)

    @property
    def msg_id(self) -> str:
        """What clients call msgId: the producer's UNIQ_KEY if set, else the offset id."""
        return self.properties.get(Prop.UNIQ_KEY) or self.offset_msg_id


#: A message's fields that equality compares directly (the properties are compared decoded).
_compared = operator.attrgetter(*(f.name for f in fields(MessageExt) if f.compare))


# The fixed part of a record with IPv4 born and store hosts, the layout nearly every record has.
_V4_FIXED = struct.Struct(">iIiiiqqiq8sq8siqi")
_HOSTS_V6 = SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6
#: The same, unpacking only total size, magic, queue offset, sys flag, store timestamp and body length.
_BODY_FIELDS = struct.Struct(">iI12xq8xi16xq20xi")
assert _BODY_FIELDS.size == _V4_FIXED.size


def decode_record(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, decompress: bool = True, check_crc: bool = False
) -> MessageExt:
    view = memoryview(buf)
    try:
        fixed = _V4_FIXED.unpack_from(view, pos)
        total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts = fixed[:9]
        if magic != MAGIC_MESSAGE:
            raise MessageDecodeError(f"bad magic code {magic:#x} at {pos}")
        if total < HEAD_SIZE_V4 + 3 or pos + total > len(view):
            raise MessageDecodeError(f"record size {total} at {pos} does not fit the buffer")
        if not sys_flag & _HOSTS_V6:
            born_raw, store_ts, store_raw, reconsume, prepared, body_len = fixed[9:]
            p = pos + _V4_FIXED.size
        else:
            born_len, store_len = _host_sizes(sys_flag)
            p = pos + 48
            born_raw = bytes(view[p : p + born_len])
            p += born_len
            (store_ts,) = _I64.unpack_from(view, p)
            p += 8
            store_raw = bytes(view[p : p + store_len])
            p += store_len
            reconsume, prepared, body_len = struct.unpack_from(">iqi", view, p)
            p += 16
        end = pos + total
        if body_len < 0 or p + body_len > end:
            raise MessageDecodeError(f"body length {body_len} overruns the record at {pos}")
        body = bytes(view[p : p + body_len])
        p += body_len
        topic_len = view[p]
        p += 1
        topic = str(view[p : p + topic_len], "utf-8")
        p += topic_len
        (props_len,) = _I16.unpack_from(view, p)
        p += 2
        if props_len < 0 or p + props_len != end:
            raise MessageDecodeError(f"properties length {props_len} does not close the record at {pos}")
        props = decode_properties(str(view[p:end], "utf-8")) if props_len else {}
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, MessageDecodeError):
            raise
        raise MessageDecodeError(f"malformed record at {pos}: {exc}") from None
    if check_crc and body_crc(body) != crc:
        raise MessageDecodeError(f"body CRC mismatch at {pos}")
    if decompress and sys_flag & SysFlag.COMPRESSED:
        try:
            body = decompress_body(body)
        except zlib.error as exc:
            raise MessageDecodeError(f"compressed body does not inflate: {exc}") from None
    return MessageExt(
        topic,
        body,
        queue_id,
        queue_offset,
        phys,
        flag,
        sys_flag,
        born_ts,
        store_ts,
        store_raw,
        born_raw,
        reconsume,
        prepared,
        crc,
        total,
        props,
    )


def iter_records(buf: bytes | bytearray | memoryview, *, decompress: bool = True) -> Iterator[MessageExt]:
    """Decode records laid back to back (a pull or query response body)."""
    pos = 0
    view = memoryview(buf)
    while pos < len(view):
        msg = decode_record(view, pos, decompress=decompress)
        pos += msg.store_size
        yield msg


def decode_records(buf: bytes | bytearray | memoryview, *, decompress: bool = True) -> list[MessageExt]:
    """Every record of a pull answer (records back to back) in one pass.

    The common record (IPv4 hosts, nothing to inflate, well formed) is decoded inline here, about twice as
    fast as ``decode_record`` per message, and its properties are left as text until read; any other record
    goes through ``decode_record``, which also names what is wrong with a malformed one.
    """
    data = buf if isinstance(buf, bytes) else bytes(buf)
    out: list[MessageExt] = []
    append = out.append
    unpack, fixed_size = _V4_FIXED.unpack_from, _V4_FIXED.size
    unusual = _HOSTS_V6 | (SysFlag.COMPRESSED if decompress else 0)
    topics: dict[bytes, str] = {}
    pos, size = 0, len(data)
    while pos < size:
        try:
            (total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts,
             born_raw, store_ts, store_raw, reconsume, prepared, body_len) = unpack(data, pos)  # fmt: skip
        except struct.error:
            total = magic = body_len = sys_flag = 0
        end = pos + total
        body_at = pos + fixed_size
        topic_at = body_at + body_len
        if (  # the plain record, whose topic and lengths agree with its size (as in record_bodies)
            sys_flag & unusual
            or magic != MAGIC_MESSAGE
            or not body_at <= topic_at < end <= size
            or not data[topic_at]
            or (props_at := topic_at + 3 + data[topic_at]) > end
            or int.from_bytes(data[props_at - 2 : props_at]) != end - props_at
        ):
            msg = decode_record(data, pos, decompress=decompress)  # the unusual one, or the error naming it
            append(msg)
            pos += msg.store_size
            continue
        raw_topic = data[topic_at + 1 : props_at - 2]
        try:
            topic = topics.get(raw_topic) or topics.setdefault(raw_topic, raw_topic.decode())
            props = data[props_at:end].decode() if props_at < end else ""
        except UnicodeDecodeError as exc:
            raise MessageDecodeError(f"malformed record at {pos}: {exc}") from None
        body = data[body_at:topic_at]
        append(
            MessageExt(
                topic, body, queue_id, queue_offset, phys, flag, sys_flag, born_ts, store_ts, store_raw,
                born_raw, reconsume, prepared, crc, total, props,
            )
        )  # fmt: skip
        pos = end
    return out


def record_bodies(buf: bytes | bytearray | memoryview) -> list[tuple[int, int, bytes, bytes]]:
    """(queue offset, store timestamp, body, encoded properties) of every record, in one pass.

    For a reader that needs nothing else (nsqd's channels): no ``MessageExt`` and no properties dict per
    record, and only the six fields it needs unpacked; what is not a plain record goes through
    ``decode_record`` as in ``decode_records``, but a plain record's topic and properties stay undecoded, so
    it does not refuse ones that are not UTF-8.
    """
    data = buf if isinstance(buf, bytes) else bytes(buf)
    out: list[tuple[int, int, bytes, bytes]] = []
    append = out.append
    unpack, fixed_size = _BODY_FIELDS.unpack_from, _BODY_FIELDS.size
    pos, size = 0, len(data)
    while pos < size:
        try:
            total, magic, queue_offset, sys_flag, store_ts, body_len = unpack(data, pos)
        except struct.error:
            total = magic = body_len = sys_flag = 0
        end = pos + total
        body_at = pos + fixed_size
        topic_at = body_at + body_len
        if (
            sys_flag & _HOSTS_V6
            or magic != MAGIC_MESSAGE
            or not body_at <= topic_at < end <= size
            or not data[topic_at]
            or (props_at := topic_at + 3 + data[topic_at]) > end
            or int.from_bytes(data[props_at - 2 : props_at]) != end - props_at
        ):
            msg = decode_record(data, pos, decompress=False)
            append(
                (msg.queue_offset, msg.store_timestamp, msg.body, encode_properties(msg.properties).encode())
            )
            pos += msg.store_size
            continue
        append((queue_offset, store_ts, data[body_at:topic_at], data[props_at:end]))
        pos = end
    return out
