"""Property tests: the decoders never fail with anything but their own errors, and encoders round-trip."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.nsq.protocol import MAGIC_V2, CommandParser, FinRun, NSQError
from tidemq.record import (
    PROPERTY_SEPARATOR,
    BatchItem,
    MessageDecodeError,
    SysFlag,
    build_stored_batch,
    build_uniform_batch,
    decode_batch,
    decode_properties,
    decode_record,
    decode_records,
    encode_batch,
    encode_properties,
    encode_record,
    iter_records,
    record_bodies,
    tag_hash,
)
from tidemq.remoting.codes import LanguageCode, SerializeType
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.frame import FrameDecoder, FrameError, HeaderError, encode

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
STRUCTURED = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROUND_TRIP = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)

# --- strategies for frames ----------------------------------------------------------------------------

_JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.sampled_from(["105", "-1", "--1", "\u00b2", "JAVA", "GO", ""]),
)
_JSON_VALUES = st.recursive(
    _JSON_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


def _json_text(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


_NUMBER_LIKE = st.from_regex(r"\A[-+]{0,2}[0-9\u00b2\u0663 ]{0,3}-?\Z")
_GOOD_VALUES = {
    "code": INT16,
    "opaque": INT32,
    "flag": INT32,
    "version": INT16,
    "language": st.sampled_from(["JAVA", "GO", "CPP", "PYTHON", "OTHER", "NOPE"]),
    "remark": st.one_of(st.none(), st.text(max_size=8)),
    "extFields": st.one_of(st.none(), st.dictionaries(st.text(max_size=5), _JSON_SCALARS, max_size=4)),
    "serializeTypeCurrentRPC": st.just("JSON"),
}
_INT_KEYS = ("code", "opaque", "flag", "version")


@st.composite
def json_headers(draw: st.DrawFn) -> bytes:
    """JSON objects shaped like headers: each key is mostly well typed, sometimes absent or wrong."""
    header: dict = {}
    for key, good in _GOOD_VALUES.items():
        choice = draw(st.integers(0, 19))
        if choice == 0:
            continue  # absent
        if choice == 1:
            header[key] = draw(_NUMBER_LIKE if key in _INT_KEYS else _JSON_VALUES)
        elif choice == 2:
            header[key] = draw(_JSON_VALUES)
        else:
            header[key] = draw(good)
    if draw(st.integers(0, 19)) == 0:
        header = draw(_JSON_VALUES)  # not even an object
    text = _json_text(header)
    if draw(st.integers(0, 9)) == 0:  # damage it
        i = draw(st.integers(0, len(text)))
        text = text[:i] + draw(st.binary(max_size=3)) + text[i + draw(st.integers(0, 3)) :]
    return text


@st.composite
def binary_headers(draw: st.DrawFn) -> bytes:
    """ROCKETMQ headers: a valid-looking fixed part followed by random or lightly damaged lengths."""
    fixed = struct.pack(
        ">hbhii", draw(INT16), draw(st.integers(-128, 127)), draw(INT16), draw(INT32), draw(INT32)
    )
    remark = draw(st.binary(max_size=8))
    ext = b""
    for _ in range(draw(st.integers(0, 3))):
        key, val = draw(st.binary(max_size=6)), draw(st.binary(max_size=6))
        key_len = len(key) if draw(st.integers(0, 9)) else draw(st.integers(0, 0xFFFF))
        val_len = len(val) if draw(st.integers(0, 9)) else draw(INT32)
        ext += struct.pack(">H", key_len) + key + struct.pack(">i", val_len) + val
    remark_len = len(remark) if draw(st.integers(0, 9)) else draw(INT32)
    ext_len = len(ext) if draw(st.integers(0, 9)) else draw(INT32)
    data = fixed + struct.pack(">i", remark_len) + remark + struct.pack(">i", ext_len) + ext
    return data[: draw(st.integers(0, len(data)))] if draw(st.integers(0, 4)) == 0 else data


@st.composite
def frame_streams(draw: st.DrawFn) -> bytes:
    """A mix of well-framed random headers and raw junk, so both the framing and header paths run."""
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["json"] * 4 + ["binary"] * 3 + ["raw", "junk-type"]))
        if kind == "raw":
            parts.append(draw(st.binary(max_size=40)))
            continue
        header = draw(json_headers()) if kind == "json" else draw(binary_headers())
        stype = {"json": 0, "binary": 1}.get(kind, draw(st.integers(2, 255)))
        body = draw(st.binary(max_size=16))
        # mostly consistent lengths, so that most frames reach the header decoders
        hdr_len = len(header) if draw(st.integers(0, 9)) else draw(st.integers(0, 0xFFFFFF))
        length = 4 + len(header) + len(body) if draw(st.integers(0, 9)) else draw(INT32)
        parts.append(struct.pack(">iI", length, (stype << 24) | hdr_len) + header + body)
    return b"".join(parts)


def _reads(data: bytes, cuts: list[int]) -> Iterator[memoryview]:
    """``data`` cut at ``cuts``, each piece a view of one reused buffer that is scribbled over once the
    piece was fed, as a connection's receive buffer is: a decoder must copy whatever it keeps."""
    buffer = bytearray(len(data))
    view = memoryview(buffer)
    prev = 0
    for cut in [*cuts, len(data)]:
        size = cut - prev
        buffer[:size] = data[prev:cut]
        yield view[:size]
        buffer[:size] = b"\xee" * size
        prev = cut


def _feed_all(data: bytes, cuts: list[int]) -> list[RemotingCommand | HeaderError]:
    decoder = FrameDecoder()
    out: list[RemotingCommand | HeaderError] = []
    for piece in _reads(data, cuts):
        out += decoder.feed(piece)
    return out


def _check_decoder_contract(data: bytes, cuts: list[int]) -> None:
    try:
        out = _feed_all(data, cuts)
    except FrameError:
        return
    for item in out:
        assert isinstance(item, RemotingCommand | HeaderError)
        if isinstance(item, RemotingCommand):
            assert all(isinstance(k, str) and isinstance(v, str) for k, v in item.ext_fields.items())
            assert isinstance(item.code, int)
            assert isinstance(item.opaque, int)
            assert item.remark is None or isinstance(item.remark, str)


# --- (1) FrameDecoder never raises anything but FrameError ------------------------------------------


@FUZZ
@given(st.data())
def test_frame_decoder_random_bytes(data: st.DataObject) -> None:
    raw = data.draw(st.binary(max_size=200))
    _check_decoder_contract(raw, data.draw(st.lists(st.integers(0, len(raw)), max_size=4).map(sorted)))


@STRUCTURED
@given(st.data())
def test_frame_decoder_structured_junk(data: st.DataObject) -> None:
    stream = data.draw(frame_streams())
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    _check_decoder_contract(stream, cuts)


@STRUCTURED
@given(st.data())
def test_frame_decoder_chunking_does_not_change_the_result(data: st.DataObject) -> None:
    stream = data.draw(frame_streams())
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))

    def summary(decode: Callable[[], list[RemotingCommand | HeaderError]]) -> object:
        try:
            out = decode()
        except FrameError:
            return "FrameError"
        return [
            (type(x).__name__, str(x), x.opaque)
            if isinstance(x, HeaderError)
            else (x.code, x.opaque, x.flag, x.ext_fields, x.remark, bytes(x.body))
            for x in out
        ]

    # same commands and header errors, or a FrameError either way
    assert summary(lambda: FrameDecoder().feed(stream)) == summary(lambda: _feed_all(stream, cuts))


# --- (2) record and batch decoders raise only MessageDecodeError --------------------------------------


def _valid_record(draw: st.DrawFn) -> bytes:
    """A well-formed record; its sys_flag may still claim IPv6 hosts that are not there."""
    return bytes(_record_and_body_len_pos(draw)[0])


def _record_and_body_len_pos(draw: st.DrawFn) -> tuple[bytes, int]:
    born = draw(st.sampled_from([bytes(8), bytes(20)]))
    store = draw(st.sampled_from([bytes(8), bytes(20)]))
    data = encode_record(
        topic=draw(st.text(max_size=5)),
        queue_id=draw(INT32),
        body=draw(st.binary(max_size=20)),
        properties=draw(st.text(max_size=10)),
        sys_flag=draw(st.sampled_from([0, 1, 0x10, 0x20, 0x31])),
        born_host=born,
        store_host=store,
    )
    return bytes(data), 84 + len(born) - 8 + len(store) - 8


@st.composite
def record_like_bytes(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["raw", "mutated", "truncated", "concat", "lengths"]))
    if kind == "raw":
        return draw(st.binary(max_size=300))
    record, body_len_pos = _record_and_body_len_pos(draw)
    data = bytearray(record)
    if kind == "lengths":
        # rewrite TOTALSIZE or BODYLEN with a value near the real sizes
        pos = draw(st.sampled_from([0, body_len_pos]))
        # the largest value that still fits the buffer, give or take a few bytes
        edge = len(data) if pos == 0 else len(data) - body_len_pos - 4
        value = draw(st.one_of(st.integers(-4, len(data) + 4), st.integers(edge - 3, edge + 3)))
        struct.pack_into(">i", data, pos, value)
        return bytes(data)
    if kind == "truncated":
        return bytes(data[: draw(st.integers(0, len(data)))])
    if kind == "concat":
        return bytes(data) + _valid_record(draw) + draw(st.binary(max_size=8))
    for _ in range(draw(st.integers(1, 5))):
        i = draw(st.integers(0, len(data) - 1))
        data[i] = draw(st.integers(0, 255))
    return bytes(data)


@FUZZ
@given(record_like_bytes(), st.booleans(), st.booleans())
def test_record_decoders_raise_only_message_decode_error(data: bytes, decompress: bool, crc: bool) -> None:
    with contextlib.suppress(MessageDecodeError):
        decode_record(data, decompress=decompress, check_crc=crc)
    with contextlib.suppress(MessageDecodeError):
        for msg in iter_records(data, decompress=decompress):
            assert msg.store_size >= 91


@st.composite
def records_with_a_bad_inner_length(draw: st.DrawFn) -> bytes:
    """A valid record then one whose topic length byte or properties length is off by a little."""
    record, body_len_pos = _record_and_body_len_pos(draw)
    data = bytearray(record)
    (body_len,) = struct.unpack_from(">i", data, body_len_pos)
    topic_len_pos = body_len_pos + 4 + body_len
    props_len_pos = topic_len_pos + 1 + data[topic_len_pos]
    if draw(st.booleans()):
        data[topic_len_pos] = max(0, min(255, data[topic_len_pos] + draw(st.integers(-3, 3))))
    else:
        (props_len,) = struct.unpack_from(">h", data, props_len_pos)
        struct.pack_into(">h", data, props_len_pos, max(-(2**15), props_len + draw(st.integers(-3, 3))))
    return _valid_record(draw) + bytes(data)


@FUZZ
@given(st.one_of(record_like_bytes(), records_with_a_bad_inner_length()))
def test_decode_records_agrees_with_iter_records(data: bytes) -> None:
    """The one-pass pull decoder: the same messages as the record-by-record one, or the same refusal."""
    try:
        expected = list(iter_records(data))
    except MessageDecodeError:
        with pytest.raises(MessageDecodeError):
            decode_records(data)
        return
    assert decode_records(data) == expected
    assert decode_records(memoryview(data)) == expected


@FUZZ
@given(st.one_of(record_like_bytes(), records_with_a_bad_inner_length()))
def test_record_bodies_agree_with_iter_records(data: bytes) -> None:
    """nsqd's lean reader: the same offsets, timestamps, bodies and properties, or a refusal."""
    try:
        expected = list(iter_records(data, decompress=False))
    except MessageDecodeError:
        with contextlib.suppress(MessageDecodeError):  # it does not decode properties: may accept
            record_bodies(data)
        return
    got = record_bodies(data)
    assert [(o, ts, body) for o, ts, body, _ in got] == [
        (m.queue_offset, m.store_timestamp, m.body) for m in expected
    ]
    assert [decode_properties(props.decode()) for *_, props in got] == [m.properties for m in expected]


@FUZZ
@given(st.binary(max_size=300), st.integers(0, 400))
def test_decode_record_at_random_position(data: bytes, pos: int) -> None:
    with contextlib.suppress(MessageDecodeError):
        decode_record(data, pos)


@st.composite
def batch_like_bytes(draw: st.DrawFn) -> bytes:
    if draw(st.booleans()):
        return draw(st.binary(max_size=200))
    item = st.builds(BatchItem, INT32, st.binary(max_size=10), st.text(max_size=10))
    items = draw(st.lists(item, max_size=4))
    data = bytearray(encode_batch(items))
    for _ in range(draw(st.integers(0, 4))):
        if data:
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return bytes(data[: draw(st.integers(0, len(data)))]) if draw(st.booleans()) else bytes(data)


@FUZZ
@given(batch_like_bytes())
def test_decode_batch_raises_only_message_decode_error(data: bytes) -> None:
    try:
        items = decode_batch(data)
    except MessageDecodeError:
        return
    assert all(isinstance(item, BatchItem) for item in items)


# --- (3) round trips ------------------------------------------------------------------------------------

_TEXT = st.text(max_size=12)


@st.composite
def commands(draw: st.DrawFn) -> RemotingCommand:
    stype = draw(st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ]))
    remark = draw(st.one_of(st.none(), _TEXT))
    return RemotingCommand(
        draw(INT16),
        opaque=draw(INT32),
        flag=draw(INT32),
        ext_fields=draw(st.dictionaries(_TEXT, _TEXT, max_size=6)),
        body=draw(st.binary(max_size=64)),
        remark=remark,
        language=draw(st.sampled_from(list(LanguageCode))),
        version=draw(INT16),
        serialize_type=stype,
    )


def _expected_remark(cmd: RemotingCommand) -> str | None:
    # the binary header has no null/empty distinction: length 0 decodes as null, like Java >= 4.9.4
    if cmd.serialize_type == SerializeType.ROCKETMQ and cmd.remark == "":
        return None
    return cmd.remark


@ROUND_TRIP
@given(st.lists(commands(), min_size=1, max_size=4), st.data())
def test_command_round_trip(cmds: list[RemotingCommand], data: st.DataObject) -> None:
    stream = b"".join(encode(c) for c in cmds)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=4)))
    out = _feed_all(stream, cuts)
    assert len(out) == len(cmds)
    for got, want in zip(out, cmds, strict=True):
        assert isinstance(got, RemotingCommand)
        assert got.code == want.code
        assert got.opaque == want.opaque
        assert got.flag == want.flag
        assert got.ext_fields == want.ext_fields
        assert got.remark == _expected_remark(want)
        assert got.body == want.body
        assert got.language == want.language
        assert got.version == want.version
        assert got.serialize_type == want.serialize_type
        assert got.is_response == want.is_response
        assert got.is_oneway == want.is_oneway


_PROP_PART = st.text(
    alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=10,
)
_IPV4 = st.builds(
    lambda ip, port: (ip + struct.pack(">i", port), ".".join(map(str, ip)) + f":{port}"),
    st.binary(min_size=4, max_size=4),
    st.integers(0, 65535),
)


def _v6_text(ip: bytes, port: int) -> str:
    return f"[{ipaddress.IPv6Address(ip)}]:{port}"


_IPV6 = st.builds(
    lambda ip, port: (ip + struct.pack(">i", port), _v6_text(ip, port)),
    st.binary(min_size=16, max_size=16),
    st.integers(0, 65535),
)


@st.composite
def records(draw: st.DrawFn) -> dict:
    topic = draw(st.text(max_size=40).filter(lambda t: len(t.encode()) <= 127))
    born, born_text = draw(st.one_of(_IPV4, _IPV6))
    store, store_text = draw(st.one_of(_IPV4, _IPV6))
    compressed = draw(st.booleans())
    body = draw(st.binary(max_size=200))
    # only bits the encoder does not own: compression/v6 are derived from the other arguments
    sys_flag = draw(INT32) & ~(SysFlag.COMPRESSED | SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6)
    if compressed:
        sys_flag |= SysFlag.COMPRESSED
    return dict(
        topic=topic,
        queue_id=draw(INT32),
        body=body,
        compressed=compressed,
        props=draw(st.dictionaries(_PROP_PART, _PROP_PART, max_size=5)),
        flag=draw(INT32),
        sys_flag=sys_flag,
        born_timestamp=draw(INT64),
        born=born,
        born_text=born_text,
        store_timestamp=draw(INT64),
        store=store,
        store_text=store_text,
        reconsume_times=draw(INT32),
        prepared=draw(INT64),
        queue_offset=draw(INT64),
        commit_log_offset=draw(INT64),
    )


@ROUND_TRIP
@given(st.lists(records(), min_size=1, max_size=2))
def test_record_round_trip(recs: list[dict]) -> None:
    encoded = []
    for r in recs:
        stored = zlib.compress(r["body"], 5) if r["compressed"] else r["body"]
        encoded.append(
            bytes(
                encode_record(
                    topic=r["topic"],
                    queue_id=r["queue_id"],
                    body=stored,
                    properties=encode_properties(r["props"]),
                    flag=r["flag"],
                    sys_flag=r["sys_flag"],
                    born_timestamp=r["born_timestamp"],
                    born_host=r["born"],
                    store_timestamp=r["store_timestamp"],
                    store_host=r["store"],
                    reconsume_times=r["reconsume_times"],
                    prepared_transaction_offset=r["prepared"],
                    queue_offset=r["queue_offset"],
                    commit_log_offset=r["commit_log_offset"],
                )
            )
        )
    decoded = list(iter_records(b"".join(encoded)))
    assert decode_records(b"".join(encoded)) == decoded
    stored_bodies = [m.body for m in iter_records(b"".join(encoded), decompress=False)]
    assert [body for _, _, body, _ in record_bodies(b"".join(encoded))] == stored_bodies
    assert len(decoded) == len(recs)
    for msg, r, raw in zip(decoded, recs, encoded, strict=True):
        v6_bits = (SysFlag.BORNHOST_V6 if len(r["born"]) == 20 else 0) | (
            SysFlag.STOREHOST_V6 if len(r["store"]) == 20 else 0
        )
        assert msg.topic == r["topic"]
        assert msg.body == r["body"]
        assert msg.queue_id == r["queue_id"]
        assert msg.flag == r["flag"]
        assert msg.sys_flag == r["sys_flag"] | v6_bits
        assert msg.born_timestamp == r["born_timestamp"]
        assert msg.born_host == r["born_text"]
        assert msg.store_timestamp == r["store_timestamp"]
        assert msg.store_host == r["store_text"]
        assert msg.store_host_raw == r["store"]
        assert msg.reconsume_times == r["reconsume_times"]
        assert msg.prepared_transaction_offset == r["prepared"]
        assert msg.queue_offset == r["queue_offset"]
        assert msg.commit_log_offset == r["commit_log_offset"]
        assert msg.properties == r["props"]
        assert msg.store_size == len(raw)
        assert decode_record(raw, check_crc=True).body == r["body"]


_NSQ_LINES = st.one_of(
    st.binary(min_size=16, max_size=16).map(lambda i: b"FIN " + i.replace(b"\n", b"x") + b"\n"),
    st.binary(max_size=15).map(lambda i: b"FIN " + i.replace(b"\n", b"x") + b"\n"),
    st.sampled_from([b"CLS\n", b"NOP\n", b"NO\n"]),
    st.integers(0, 3000).map(lambda n: b"RDY %d\n" % n),
    st.just(b"NOP\r\n"),
    st.binary(max_size=20).map(lambda b: b"PUB t " + b.replace(b"\n", b" ") + b"\n"),
    st.binary(max_size=40).map(lambda body: b"PUB topic\n" + struct.pack(">i", len(body)) + body),
    st.integers(-5, 6000).map(lambda n: b"DPUB topic 5\n" + struct.pack(">i", n)),
)


def _nsq_commands(
    pieces: Iterable[bytes | memoryview],
) -> list[tuple[bytes, list[bytes], bytes | None] | str]:
    parser = CommandParser(max_body_size=5000, max_msg_size=100)
    out: list[tuple[bytes, list[bytes], bytes | None] | str] = []
    for piece in pieces:
        for item in parser.feed(piece):
            if isinstance(item, FinRun):
                out += [(b"FIN", [msg_id], None) for msg_id in item.ids]
            else:
                out.append(item.code if isinstance(item, NSQError) else (item.name, item.params, item.body))
    return out


@FUZZ
@given(st.lists(_NSQ_LINES, max_size=30), st.data())
def test_nsq_command_parser_reads_the_same_however_split(lines: list[bytes], data: st.DataObject) -> None:
    """nsqd's command parser reads the same commands (and the same first fatal error) however the bytes
    are split across reads; lines without a body are read as plain space-separated words."""
    wire = MAGIC_V2 + b"".join(lines)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=8)))
    whole = _nsq_commands([wire])
    assert _nsq_commands(_reads(wire, cuts)) == whole
    assert _nsq_commands(_reads(wire, list(range(1, len(wire))))) == whole
    if not any(b"PUB" in line[:4] for line in lines):
        words = [line[: -2 if line.endswith(b"\r\n") else -1].split(b" ") for line in lines]
        assert whole == [(name, params, None) for name, *params in words]


@ROUND_TRIP
@given(
    st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=5),
    st.text(max_size=40).map(lambda t: t.replace("\x01", "").replace("\x02", "")),
    st.sampled_from([b"\x7f\x00\x00\x01\x00\x00\x10\x00", bytes(range(20))]),
    INT64,
)
def test_uniform_batch_is_the_records_encode_record_builds(
    bodies: list[bytes], value: str, host: bytes, timestamp: int
) -> None:
    """nsqd's batch builder lays out exactly the records ``encode_record`` builds one by one."""
    props = encode_properties({"NSQ_TS": value}) if value else ""
    batch = build_uniform_batch(
        bodies, topic="nsq:t", queue_id=0, properties=props, timestamp=timestamp, born_host=host,
        store_host=host,
    )  # fmt: skip
    records = [
        encode_record(
            topic="nsq:t", queue_id=0, body=body, properties=props, born_timestamp=timestamp,
            born_host=host, store_timestamp=timestamp, store_host=host,
        )
        for body in bodies
    ]  # fmt: skip
    assert bytes(batch.data) == b"".join(records)
    assert batch.sizes == [len(r) for r in records]
    assert [m.body for m in iter_records(batch.data)] == bodies


_KEY_LIKE = st.sampled_from(["TAGS\x01", "KEYS\x01", "UNIQ_KEY\x01", "DELAY\x01", "\x02", "x"])
_PROPERTY_VALUE = st.text(
    st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]), min_size=1, max_size=12
)


@ROUND_TRIP
@given(
    st.lists(
        st.tuples(
            st.lists(_KEY_LIKE, max_size=4).map(lambda parts: "".join(parts).encode()),  # body look-alikes
            st.dictionaries(
                st.sampled_from(["UNIQ_KEY", "TAGS", "KEYS", "a", "XTAGS", "XUNIQ_KEY"]),
                _PROPERTY_VALUE,
                max_size=4,
            ),
        ),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from(["", "CLUSTER\x01c1", "WAIT\x01true\x02CLUSTER\x01c1"]),
)
def test_stored_batch_is_encode_record_per_message_with_its_own_keys_and_tags(
    messages: list[tuple[bytes, dict[str, str]]], extra: str
) -> None:
    """The broker's batch builder, which searches raw properties for a few keys, agrees with decoding
    each message's properties: the records ``encode_record`` builds, tags hashed and keys indexed from
    the message's own properties only (its body may hold anything, key look-alikes included)."""
    host = b"\x7f\x00\x00\x01\x00\x00\x10\x00"
    items = [BatchItem(0, body, encode_properties(props)) for body, props in messages]
    batch = build_stored_batch(
        encode_batch(items), topic="B", queue_id=2, sys_flag=0, born_timestamp=5, born_host=host,
        store_timestamp=6, store_host=host, extra_properties=extra, max_body=1024,
    )  # fmt: skip
    records = [
        encode_record(
            topic="B", queue_id=2, body=item.body,
            properties=PROPERTY_SEPARATOR.join(p for p in (item.properties, extra) if p),
            born_timestamp=5, born_host=host, store_timestamp=6, store_host=host,
        )
        for item in items
    ]  # fmt: skip
    assert bytes(batch.data) == b"".join(records)
    assert batch.sizes == [len(r) for r in records]
    assert batch.tags_codes == [tag_hash(props.get("TAGS")) for _, props in messages]
    expected_keys = [
        props.get("KEYS", "").encode().split() + ([props["UNIQ_KEY"].encode()] if "UNIQ_KEY" in props else [])
        for _, props in messages
    ]
    assert batch.keys == expected_keys


def test_nsq_fin_run_stops_at_a_short_fin() -> None:
    """Lines that fill exactly a FIN line's 21 bytes are not read as one FIN (a read-boundary case)."""
    good = b"FIN " + b"0" * 16 + b"\n"
    wire = MAGIC_V2 + good + b"FIN a\nCLS\nNOP\nNOP\nNO\n"
    assert _nsq_commands([wire]) == [
        (b"FIN", [b"0" * 16], None),
        (b"FIN", [b"a"], None),
        (b"CLS", [], None),
        (b"NOP", [], None),
        (b"NOP", [], None),
        (b"NO", [], None),
    ]
