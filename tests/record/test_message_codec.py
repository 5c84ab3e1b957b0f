"""Stored message records, properties, ids, tag hashes and batch bodies (spec section 3)."""

from __future__ import annotations

import re
import socket
import struct
import time
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq import record as m
from tidemq.record import (
    MAGIC_MESSAGE,
    BatchItem,
    MessageDecodeError,
    SysFlag,
    UniqueIdGenerator,
    decode_batch,
    decode_offset_msg_id,
    decode_properties,
    decode_record,
    encode_batch,
    encode_properties,
    encode_record,
    iter_records,
    offset_msg_id,
    pack_host,
    tag_hash,
)

# --- independent helpers ----------------------------------------------------------------------------


def java_string_hash(s: str) -> int:
    """Java String.hashCode, simulated over UTF-16 code units without using the code under test."""
    units: list[int] = []
    for ch in s:
        cp = ord(ch)
        if cp >= 0x10000:
            cp -= 0x10000
            units += [0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)]
        else:
            units.append(cp)
    h = 0
    for unit in units:
        h = (31 * h + unit) % 2**32
    return h - 2**32 if h >= 2**31 else h


def java_string2message_properties(text: str) -> dict[str, str]:
    """Port of Java MessageDecoder.string2messageProperties (4.9.x)."""
    out: dict[str, str] = {}
    index, length = 0, len(text)
    while index < length:
        new_index = text.find("\x02", index)
        if new_index < 0:
            new_index = length
        if new_index - index >= 3:
            kv = text.find("\x01", index)
            if index < kv < new_index - 1:
                out[text[index:kv]] = text[kv + 1 : new_index]
        index = new_index + 1
    return out


def v4(ip: str, port: int) -> bytes:
    return socket.inet_pton(socket.AF_INET, ip) + struct.pack(">i", port)


def v6(ip: str, port: int) -> bytes:
    return socket.inet_pton(socket.AF_INET6, ip) + struct.pack(">i", port)


# --- tag hash ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("tag", "value"), [("TagA", 2598919), ("TagB", 2598920), ("*", 42)])
def test_tag_hash_spec_examples(tag: str, value: int) -> None:
    assert tag_hash(tag) == value
    assert java_string_hash(tag) == value


@pytest.mark.parametrize("tag", [None, ""])
def test_tag_hash_absent_is_zero(tag: str | None) -> None:
    assert tag_hash(tag) == 0


@pytest.mark.parametrize(
    "tag",
    [
        "\u6807\u7b7e",  # 标签 (BMP, non-ASCII)
        "caf\u00e9",
        "\U0001f600",  # one emoji = a surrogate pair in UTF-16
        "tag-\U0001f680-\U0001d11e-end",
        "a" * 100,  # overflows many times
        "polygenelubricants",  # famous: Java hashCode is Integer.MIN_VALUE
        "\uffff\U00010000\U0010ffff",
    ],
)
def test_tag_hash_matches_java_for_non_ascii(tag: str) -> None:
    assert tag_hash(tag) == java_string_hash(tag)


def test_tag_hash_known_java_values() -> None:
    assert tag_hash("polygenelubricants") == -(2**31)
    assert tag_hash("hello") == 99162322
    # "\U0001f600" is the UTF-16 pair D83D DE00: 31 * 0xD83D + 0xDE00
    assert tag_hash("\U0001f600") == 31 * 0xD83D + 0xDE00


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_tag_hash_property(tag: str) -> None:
    value = tag_hash(tag)
    assert value == java_string_hash(tag)
    assert -(2**31) <= value < 2**31


# --- properties -------------------------------------------------------------------------------------


def test_properties_with_and_without_trailing_separator() -> None:
    expected = {"UNIQ_KEY": "ABC", "WAIT": "true", "TAGS": "TagA"}
    assert decode_properties("UNIQ_KEY\x01ABC\x02WAIT\x01true\x02TAGS\x01TagA") == expected
    assert decode_properties("UNIQ_KEY\x01ABC\x02WAIT\x01true\x02TAGS\x01TagA\x02") == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        (None, {}),
        ("\x02", {}),
        ("\x02\x02a\x01b\x02\x02", {"a": "b"}),
        ("\x01v\x02k\x01w", {"k": "w"}),  # empty key skipped
        ("k\x01\x02x\x01y", {"x": "y"}),  # empty value skipped
        ("ab\x02c\x01d", {"c": "d"}),  # segment without a separator skipped
        ("k\x01v\x01w", {"k": "v\x01w"}),  # Java: only the first \x01 separates
        ("a\x01b\x02a\x01c", {"a": "c"}),  # later duplicates win
        ("\u952e\x01\u503c", {"\u952e": "\u503c"}),
    ],
)
def test_properties_parsing_rules(text: str | None, expected: dict[str, str]) -> None:
    assert decode_properties(text) == expected
    if text is not None:
        assert java_string2message_properties(text) == expected


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab\x01\x02\u00e9", max_size=30))
def test_properties_parsing_matches_java(text: str) -> None:
    assert decode_properties(text) == java_string2message_properties(text)


def test_encode_properties_has_no_trailing_separator() -> None:
    assert encode_properties({"a": "1", "b": "2"}) == "a\x011\x02b\x012"
    assert encode_properties({}) == ""
    assert encode_properties({"a": None, "b": "2", "": "x"}) == "b\x012"  # type: ignore[dict-item]


_PROP_TEXT = st.text(
    alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_PROP_TEXT, _PROP_TEXT, max_size=8))
def test_properties_round_trip(props: dict[str, str]) -> None:
    text = encode_properties(props)
    assert decode_properties(text) == props
    assert decode_properties(text + "\x02") == props


# --- records ----------------------------------------------------------------------------------------


def _full_record(**overrides: object) -> bytearray:
    args: dict = dict(
        topic="TopicTest",
        queue_id=3,
        body=b"Hello RocketMQ",
        flag=7,
        properties="UNIQ_KEY\x01C0A8000100002A9F0000000000000001\x02TAGS\x01TagA\x02KEYS\x01k1 k2",
        sys_flag=0,
        born_timestamp=1700000000123,
        born_host=v4("192.168.0.1", 54321),
        store_timestamp=1700000000456,
        store_host=v4("10.0.0.1", 10911),
        reconsume_times=2,
        prepared_transaction_offset=99,
        queue_offset=41,
        commit_log_offset=123456789,
    )
    args.update(overrides)
    return encode_record(**args)


def test_record_layout_ipv4_matches_spec_offsets() -> None:
    rec = bytes(_full_record())
    props = b"UNIQ_KEY\x01C0A8000100002A9F0000000000000001\x02TAGS\x01TagA\x02KEYS\x01k1 k2"
    body = b"Hello RocketMQ"
    assert len(rec) == 91 + len(body) + len(b"TopicTest") + len(props)
    (total,) = struct.unpack_from(">i", rec, 0)
    assert total == len(rec)
    assert struct.unpack_from(">I", rec, 4)[0] == MAGIC_MESSAGE == 0xDAA320A7
    assert struct.unpack_from(">i", rec, 8)[0] == zlib.crc32(body) & 0x7FFFFFFF
    assert struct.unpack_from(">i", rec, 12)[0] == 3
    assert struct.unpack_from(">i", rec, 16)[0] == 7
    assert struct.unpack_from(">q", rec, 20)[0] == 41
    assert struct.unpack_from(">q", rec, 28)[0] == 123456789
    assert struct.unpack_from(">i", rec, 36)[0] == 0
    assert struct.unpack_from(">q", rec, 40)[0] == 1700000000123
    assert rec[48:56] == bytes([192, 168, 0, 1]) + struct.pack(">i", 54321)
    assert struct.unpack_from(">q", rec, 56)[0] == 1700000000456
    assert rec[64:72] == bytes([10, 0, 0, 1]) + struct.pack(">i", 10911)
    assert struct.unpack_from(">i", rec, 72)[0] == 2
    assert struct.unpack_from(">q", rec, 76)[0] == 99
    assert struct.unpack_from(">i", rec, 84)[0] == len(body)
    assert rec[88 : 88 + len(body)] == body
    p = 88 + len(body)
    assert rec[p] == len(b"TopicTest")
    assert rec[p + 1 : p + 10] == b"TopicTest"
    assert struct.unpack_from(">h", rec, p + 10)[0] == len(props)
    assert rec[p + 12 :] == props


def test_record_round_trip_ipv4() -> None:
    msg = decode_record(_full_record())
    assert msg.topic == "TopicTest"
    assert msg.body == b"Hello RocketMQ"
    assert msg.queue_id == 3
    assert msg.flag == 7
    assert msg.queue_offset == 41
    assert msg.commit_log_offset == 123456789
    assert msg.sys_flag == 0
    assert msg.born_timestamp == 1700000000123
    assert msg.born_host == "192.168.0.1:54321"
    assert msg.store_timestamp == 1700000000456
    assert msg.store_host == "10.0.0.1:10911"
    assert msg.store_host_raw == v4("10.0.0.1", 10911)
    assert msg.reconsume_times == 2
    assert msg.prepared_transaction_offset == 99
    assert msg.body_crc == zlib.crc32(b"Hello RocketMQ") & 0x7FFFFFFF
    assert msg.store_size == len(_full_record())
    assert msg.properties == {"UNIQ_KEY": "C0A8000100002A9F0000000000000001", "TAGS": "TagA", "KEYS": "k1 k2"}
    assert msg.tags == "TagA"
    assert msg.keys == "k1 k2"
    assert msg.msg_id == "C0A8000100002A9F0000000000000001"
    assert msg.offset_msg_id == "0A00000100002A9F00000000075BCD15"


def test_msg_id_falls_back_to_offset_id_without_uniq_key() -> None:
    msg = decode_record(_full_record(properties="TAGS\x01TagA\x02"))
    assert msg.msg_id == msg.offset_msg_id == "0A00000100002A9F00000000075BCD15"


@pytest.mark.parametrize(
    ("born", "store", "born_text", "store_text", "flags"),
    [
        (
            v6("2001:db8::1", 5000),
            v4("10.0.0.1", 10911),
            "[2001:db8::1]:5000",
            "10.0.0.1:10911",
            SysFlag.BORNHOST_V6,
        ),
        (v4("1.2.3.4", 1), v6("fe80::1:2", 10911), "1.2.3.4:1", "[fe80::1:2]:10911", SysFlag.STOREHOST_V6),
        (
            v6("::1", 65535),
            v6("2001:db8:0:0:0:0:0:ff", 10911),
            "[::1]:65535",
            "[2001:db8::ff]:10911",
            SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6,
        ),
    ],
)
def test_record_round_trip_ipv6(
    born: bytes, store: bytes, born_text: str, store_text: str, flags: int
) -> None:
    rec = _full_record(born_host=born, store_host=store, sys_flag=SysFlag.MULTI_TAGS)
    extra = (len(born) - 8) + (len(store) - 8)
    assert len(rec) == len(_full_record()) + extra
    assert struct.unpack_from(">i", rec, 36)[0] == SysFlag.MULTI_TAGS | flags
    msg = decode_record(rec)
    assert msg.sys_flag == SysFlag.MULTI_TAGS | flags
    assert msg.born_host == born_text
    assert msg.store_host == store_text
    assert msg.store_host_raw == store
    assert msg.store_timestamp == 1700000000456
    assert msg.reconsume_times == 2
    assert msg.body == b"Hello RocketMQ"
    assert msg.topic == "TopicTest"
    assert msg.properties["TAGS"] == "TagA"
    if flags & SysFlag.STOREHOST_V6:
        assert len(msg.offset_msg_id) == 56
    assert m.store_timestamp_pos(msg.sys_flag) == 48 + len(born)


def test_compressed_body_is_inflated() -> None:
    body = b"x" * 10000 + bytes(range(256))
    stored = zlib.compress(body, 5)
    rec = _full_record(body=stored, sys_flag=SysFlag.COMPRESSED | 0x300)
    msg = decode_record(rec)
    assert msg.body == body
    assert msg.body_crc == zlib.crc32(stored) & 0x7FFFFFFF  # CRC covers the stored (compressed) bytes
    raw = decode_record(rec, decompress=False)
    assert raw.body == stored
    assert m.decompress_body(m.compress_body(body)) == body


def test_compressed_flag_on_garbage_body_raises() -> None:
    with pytest.raises(MessageDecodeError):
        decode_record(_full_record(body=b"not zlib", sys_flag=SysFlag.COMPRESSED))
    assert (
        decode_record(_full_record(body=b"not zlib", sys_flag=SysFlag.COMPRESSED), decompress=False).body
        == b"not zlib"
    )


def test_body_crc_check() -> None:
    rec = _full_record()
    assert decode_record(rec, check_crc=True).body == b"Hello RocketMQ"
    rec[88] ^= 0x01  # flip a bit of the body
    with pytest.raises(MessageDecodeError, match="CRC"):
        decode_record(rec, check_crc=True)
    assert decode_record(rec).body == b"Iello RocketMQ"  # unchecked by default, like Java clients


def test_empty_body_topic_and_properties() -> None:
    rec = encode_record(topic="", queue_id=0, body=b"", properties="")
    assert len(rec) == 91
    msg = decode_record(rec)
    assert (msg.topic, msg.body, msg.properties) == ("", b"", {})


def test_encode_record_limits() -> None:
    with pytest.raises(MessageDecodeError):
        encode_record(topic="t" * 128, queue_id=0, body=b"", properties="")
    encode_record(topic="t" * 127, queue_id=0, body=b"", properties="")
    with pytest.raises(MessageDecodeError):
        encode_record(topic="T", queue_id=0, body=b"", properties="p" * 32768)
    encode_record(topic="T", queue_id=0, body=b"", properties="p" * 32767)


def test_decode_record_at_offset() -> None:
    first, second = _full_record(), _full_record(topic="Other", commit_log_offset=5)
    buf = bytes(first + second)
    msg = decode_record(buf, len(first))
    assert msg.topic == "Other"
    assert msg.commit_log_offset == 5


@pytest.mark.parametrize("cut", [0, 1, 4, 20, 50, 87, 88, 100, -1])
def test_truncated_record_raises(cut: int) -> None:
    rec = bytes(_full_record())
    with pytest.raises(MessageDecodeError):
        decode_record(rec[:cut])


def test_bad_magic_and_blank_filler_raise() -> None:
    rec = _full_record()
    struct.pack_into(">I", rec, 4, m.MAGIC_BLANK)
    with pytest.raises(MessageDecodeError, match="magic"):
        decode_record(rec)
    struct.pack_into(">I", rec, 4, 0xDAA320AB)
    with pytest.raises(MessageDecodeError):
        decode_record(rec)


@pytest.mark.parametrize("total", [0, -1, 90, 10**6])
def test_bad_total_size_raises(total: int) -> None:
    rec = _full_record()
    struct.pack_into(">i", rec, 0, total)
    with pytest.raises(MessageDecodeError):
        decode_record(rec)


def test_inconsistent_inner_lengths_raise() -> None:
    rec = _full_record()
    struct.pack_into(">i", rec, 84, 10**6)  # body length overruns
    with pytest.raises(MessageDecodeError):
        decode_record(rec)
    rec = _full_record()
    struct.pack_into(">i", rec, 84, -5)
    with pytest.raises(MessageDecodeError):
        decode_record(rec)
    rec = _full_record()
    p = 88 + len(b"Hello RocketMQ") + 1 + len(b"TopicTest")
    struct.pack_into(">h", rec, p, 1)  # properties do not close the record
    with pytest.raises(MessageDecodeError):
        decode_record(rec)
    rec = _full_record()
    struct.pack_into(">i", rec, 84, len(rec) - 88)  # body runs to the very end: no topic length byte left
    with pytest.raises(MessageDecodeError):
        decode_record(rec)
    rec = _full_record()
    rec[88 + len(b"Hello RocketMQ")] = 0xFF  # topic length overruns
    with pytest.raises(MessageDecodeError):
        decode_record(rec)


def test_bad_utf8_topic_raises() -> None:
    rec = _full_record(topic="ab")
    p = 88 + len(b"Hello RocketMQ") + 1
    rec[p] = 0xFF
    with pytest.raises(MessageDecodeError):
        decode_record(rec)


# --- iter_records -----------------------------------------------------------------------------------


def test_iter_records_over_concatenated_records() -> None:
    parts = [
        _full_record(
            queue_offset=i,
            commit_log_offset=1000 * i,
            body=bytes([i]) * i,
            topic=f"T{i}",
            born_host=v6("::1", 1) if i % 2 else v4("127.0.0.1", 1),
            store_host=v6("::2", 2) if i % 3 == 0 else v4("127.0.0.2", 2),
        )
        for i in range(10)
    ]
    buf = b"".join(parts)
    msgs = list(iter_records(buf))
    assert [x.queue_offset for x in msgs] == list(range(10))
    assert [x.topic for x in msgs] == [f"T{i}" for i in range(10)]
    assert [x.body for x in msgs] == [bytes([i]) * i for i in range(10)]
    assert [x.store_size for x in msgs] == [len(p) for p in parts]
    assert list(iter_records(memoryview(buf))) == msgs


def test_iter_records_empty_and_trailing_garbage() -> None:
    assert list(iter_records(b"")) == []
    buf = bytes(_full_record()) + b"\x00\x00"
    it = iter_records(buf)
    assert next(it).topic == "TopicTest"
    with pytest.raises(MessageDecodeError):
        next(it)


def test_iter_records_inflates_compressed() -> None:
    body = b"compress me " * 500
    buf = bytes(_full_record(body=zlib.compress(body), sys_flag=SysFlag.COMPRESSED)) + bytes(_full_record())
    assert [x.body for x in iter_records(buf)] == [body, b"Hello RocketMQ"]
    assert next(iter_records(buf, decompress=False)).body == zlib.compress(body)


# --- hosts and offset message ids ------------------------------------------------------------------


def test_pack_host() -> None:
    assert pack_host("10.0.0.1", 10911) == (bytes.fromhex("0A000001") + struct.pack(">i", 10911), False)
    raw, is_v6 = pack_host("2001:db8::1", 10911)
    assert is_v6
    assert raw == v6("2001:db8::1", 10911)
    # IPv4-mapped IPv6 socket addresses are stored as plain IPv4
    assert pack_host("::ffff:10.0.0.1", 10911) == pack_host("10.0.0.1", 10911)


def test_offset_msg_id_encode_decode_ipv4() -> None:
    store = v4("10.0.0.1", 10911)
    msg_id = offset_msg_id(store, 1234)
    assert msg_id == "0A000001" + "00002A9F" + "00000000000004D2"
    assert len(msg_id) == 32
    assert re.fullmatch("[0-9A-F]{32}", msg_id)
    assert decode_offset_msg_id(msg_id) == ("10.0.0.1:10911", 1234)
    assert decode_offset_msg_id(msg_id.lower()) == ("10.0.0.1:10911", 1234)


@given(st.sampled_from([8, 20]), st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40))
def test_offset_msg_ids_are_each_offset_msg_id_comma_joined(host_size: int, offsets: list[int]) -> None:
    """A batch's ids, built in one pass over the packed offsets, are the single ids joined."""
    store = bytes(range(7, 7 + host_size))
    assert m.offset_msg_ids(store, offsets) == ",".join(offset_msg_id(store, o) for o in offsets)


def test_offset_msg_id_encode_decode_ipv6() -> None:
    store = v6("2001:db8::7", 10911)
    msg_id = offset_msg_id(store, 2**40 + 5)
    assert len(msg_id) == 56
    assert decode_offset_msg_id(msg_id) == ("[2001:db8::7]:10911", 2**40 + 5)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=4, max_size=4), st.integers(0, 65535), st.integers(0, 2**63 - 1))
def test_offset_msg_id_property(ip: bytes, port: int, offset: int) -> None:
    msg_id = offset_msg_id(ip + struct.pack(">i", port), offset)
    assert re.fullmatch("[0-9A-F]{32}", msg_id)
    assert decode_offset_msg_id(msg_id) == (f"{socket.inet_ntoa(ip)}:{port}", offset)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "ABC",
        "0" * 31,
        "0" * 33,
        "G" * 32,
        "0" * 54,
        "\u00e9" * 32,
        "0A000001 00002A9F00000000000004D",  # odd number of digits
        "0A 0000 01002A9F00000000000004D2",  # 32 characters, but whitespace hides two of them
    ],
)
def test_bad_offset_msg_id_raises(bad: str) -> None:
    with pytest.raises(MessageDecodeError):
        decode_offset_msg_id(bad)


# --- unique ids -------------------------------------------------------------------------------------


def test_unique_ids_are_32_upper_hex_and_unique() -> None:
    gen = UniqueIdGenerator("192.168.1.20")
    ids = [gen.next_id() for _ in range(20000)]
    assert all(re.fullmatch("[0-9A-F]{32}", x) for x in ids)
    assert len(set(ids)) == len(ids)
    # ip in the first 4 bytes, pid next
    assert ids[0].startswith("C0A80114")
    other = UniqueIdGenerator("192.168.1.20")
    more = {other.next_id() for _ in range(1000)}
    assert not more & set(ids)


def test_unique_id_time_field_follows_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Characters 20-27 are the milliseconds since the month began (Java's layout), however often the
    generator is asked within one millisecond."""
    import tidemq.record.ids as ids

    now = [time.mktime((2026, 11, 1, 0, 0, 0, 0, 0, -1)) + 5.0]  # 5 s into the month
    monkeypatch.setattr(ids.time, "time", lambda: now[0])
    gen = UniqueIdGenerator("192.168.1.20")
    first, second = gen.next_id(), gen.next_id()
    assert first[20:28] == second[20:28] == f"{5000:08X}" and first[28:] != second[28:]
    now[0] += 0.0015
    assert gen.next_id()[20:28] == f"{5001:08X}"
    now[0] = time.mktime((2026, 12, 1, 0, 0, 0, 0, 0, -1)) + 0.25  # a new month starts the count again
    assert gen.next_id()[20:28] == f"{250:08X}"
    assert gen.next_ids(2)[1][20:28] == f"{250:08X}"


def test_unique_ids_with_ipv6_and_default_host() -> None:
    for gen in (UniqueIdGenerator("2001:db8::1"), UniqueIdGenerator()):
        ids = {gen.next_id() for _ in range(500)}
        assert len(ids) == 500
        assert all(re.fullmatch("[0-9A-F]{32}", x) for x in ids)


# --- batch bodies (spec 3.5) ------------------------------------------------------------------------


def test_batch_layout_matches_spec() -> None:
    items = [BatchItem(0, b"one", "UNIQ_KEY\x01A\x02TAGS\x01T1"), BatchItem(5, b"", "")]
    data = encode_batch(items)
    props0 = b"UNIQ_KEY\x01A\x02TAGS\x01T1"
    first = struct.pack(">iiiii", 22 + 3 + len(props0), 0, 0, 0, 3) + b"one" + struct.pack(">h", len(props0))
    first += props0
    second = struct.pack(">iiiii", 22, 0, 0, 5, 0) + struct.pack(">h", 0)
    assert data == first + second
    assert decode_batch(data) == items


def test_batch_decode_ignores_client_magic_and_crc() -> None:
    body, props = b"payload", b"KEYS\x01k"
    rec = struct.pack(">iiiii", 22 + len(body) + len(props), 0x1234, -7, 3, len(body)) + body
    rec += struct.pack(">h", len(props)) + props
    assert decode_batch(rec * 3) == [BatchItem(3, body, "KEYS\x01k")] * 3


def test_batch_empty() -> None:
    assert encode_batch([]) == b""
    assert decode_batch(b"") == []


@pytest.mark.parametrize("cut", [1, 5, 21, 25])
def test_truncated_batch_raises(cut: int) -> None:
    data = encode_batch([BatchItem(0, b"abcdef", "k\x01v")])
    with pytest.raises(MessageDecodeError):
        decode_batch(data[:cut])


def test_batch_inconsistent_sizes_raise() -> None:
    good = bytearray(encode_batch([BatchItem(0, b"abcdef", "k\x01v")]))
    for offset, value, fmt in [
        (0, 10, ">i"),
        (0, 1000, ">i"),
        (16, -1, ">i"),
        (16, 100, ">i"),
        (26, 5, ">h"),
        (26, -1, ">h"),
    ]:
        bad = bytearray(good)
        struct.pack_into(fmt, bad, offset, value)
        with pytest.raises(MessageDecodeError):
            decode_batch(bytes(bad))


_BATCH_ITEMS = st.lists(
    st.builds(BatchItem, st.integers(-(2**31), 2**31 - 1), st.binary(max_size=64), st.text(max_size=40)),
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(_BATCH_ITEMS)
def test_batch_round_trip(items: list[BatchItem]) -> None:
    assert decode_batch(encode_batch(items)) == items


def test_sysflag_transaction_value() -> None:
    assert SysFlag.transaction_value(SysFlag.TRANSACTION_PREPARED | SysFlag.COMPRESSED) == 0x4
    assert SysFlag.transaction_value(SysFlag.TRANSACTION_ROLLBACK | SysFlag.BORNHOST_V6) == 0xC
    assert SysFlag.transaction_value(SysFlag.MULTI_TAGS) == SysFlag.TRANSACTION_NOT_TYPE


def test_pulled_properties_decode_when_read_and_take_added_ones_either_way() -> None:
    """``decode_records`` leaves each message's properties as stored text until they are read; properties
    added before or after that read end up the same, and equality compares them decoded."""
    record = m.encode_record(topic="T", queue_id=0, body=b"b", properties="UNIQ_KEY\x01u1\x02TAGS\x01red")
    untouched, read = m.decode_records(record + record)
    assert isinstance(untouched.props, str)
    assert read.properties == {"UNIQ_KEY": "u1", "TAGS": "red"} and isinstance(read.props, dict)
    hints = m.encode_properties({"MIN_OFFSET": "0", "TAGS": "blue"})
    untouched.add_properties(hints)
    read.add_properties(hints)
    assert isinstance(untouched.props, str)
    assert untouched == read  # compared decoded
    assert untouched.properties == read.properties == {"UNIQ_KEY": "u1", "TAGS": "blue", "MIN_OFFSET": "0"}
    assert untouched.msg_id == "u1" and untouched.tags == "blue"
    read.properties["TAGS"] = "green"
    assert untouched != read
    empty = m.decode_records(m.encode_record(topic="T", queue_id=0, body=b"b", properties=""))[0]
    empty.add_properties(hints)
    assert empty.properties == {"MIN_OFFSET": "0", "TAGS": "blue"}


def test_put_property_leaves_stored_text_undecoded_and_the_latest_value_wins() -> None:
    """What the push consumers stamp on every message (its consume start time) does not decode the stored
    properties; stamped again, as a retried message is, the newest stamp is the one read."""
    record = m.encode_record(topic="T", queue_id=0, body=b"b", properties="UNIQ_KEY\x01u1")
    untouched, read = m.decode_records(record + record)
    read.properties  # noqa: B018 (decoded before the stamps)
    for msg in (untouched, read):
        msg.put_property("CONSUME_START_TIME", "1")
        msg.put_property("CONSUME_START_TIME", "2")
    assert isinstance(untouched.props, str)
    assert untouched.properties == read.properties == {"UNIQ_KEY": "u1", "CONSUME_START_TIME": "2"}
