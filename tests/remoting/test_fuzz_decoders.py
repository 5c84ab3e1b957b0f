"""Property tests of the wire decoders (remoting frames and headers, nsqd's command parser): they never
fail with anything but their own errors, read the same however the bytes are split, and round-trip.

The record layer's decoders are fuzzed in tests/record/test_fuzz_records.py.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable, Iterator

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.nsq.protocol import MAGIC_V2, CommandParser, FinRun, NSQError
from tidemq.remoting.codes import LanguageCode, SerializeType
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.frame import FrameDecoder, FrameError, HeaderError, encode

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
STRUCTURED = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROUND_TRIP = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)

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


# --- (2) round trips ------------------------------------------------------------------------------------

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
