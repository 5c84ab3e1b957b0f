"""Framing (spec 1.2-1.5): JSON and ROCKETMQ headers, both directions, incremental decoding."""

from __future__ import annotations

import json
import struct

import pytest

from tidemq.remoting import frame
from tidemq.remoting.codes import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    LanguageCode,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.frame import (
    MAX_FRAME_LENGTH,
    FrameDecoder,
    FrameError,
    HeaderError,
    decode_header,
    encode,
    encode_header,
    encode_parts,
)

# --- helpers ----------------------------------------------------------------------------------------


def json_frame(header: bytes | str | dict, body: bytes = b"") -> bytes:
    """Build a JSON frame by hand, independently of the encoder under test."""
    if isinstance(header, dict):
        header = json.dumps(header, separators=(",", ":"))
    if isinstance(header, str):
        header = header.encode()
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def binary_frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), (1 << 24) | len(header)) + header + body


def decode_one(data: bytes) -> RemotingCommand:
    out = FrameDecoder().feed(data)
    assert len(out) == 1
    (cmd,) = out
    assert isinstance(cmd, RemotingCommand), cmd
    return cmd


def decode_header_error(data: bytes) -> HeaderError:
    out = FrameDecoder().feed(data)
    assert len(out) == 1
    (err,) = out
    assert isinstance(err, HeaderError), err
    return err


def same_command(a: RemotingCommand, b: RemotingCommand) -> None:
    assert (a.code, a.opaque, a.flag, a.language, a.version, a.serialize_type) == (
        b.code,
        b.opaque,
        b.flag,
        b.language,
        b.version,
        b.serialize_type,
    )
    assert a.ext_fields == b.ext_fields
    assert a.remark == b.remark
    assert bytes(a.body) == bytes(b.body)


# --- spec worked examples ---------------------------------------------------------------------------

SPEC_JSON_HEADER = (
    b'{"code":105,"flag":0,"language":"JAVA","opaque":1,"version":401,"extFields":{"topic":"T"}}'
)
SPEC_JSON_FRAME = bytes.fromhex("0000005e0000005a") + SPEC_JSON_HEADER
SPEC_BINARY_FRAME = bytes.fromhex(
    "00000025 01000021 0069 00 0191 00000001 00000000 00000000 0000000c 0005 746f706963 00000001 54"
)


def test_spec_json_example_sizes() -> None:
    assert len(SPEC_JSON_HEADER) == 90
    assert len(SPEC_JSON_FRAME) == 4 + 0x5E


def test_spec_json_example_decodes() -> None:
    cmd = decode_one(SPEC_JSON_FRAME)
    assert cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC == 105
    assert cmd.flag == 0
    assert cmd.language == LanguageCode.JAVA
    assert cmd.opaque == 1
    assert cmd.version == 401
    assert cmd.ext_fields == {"topic": "T"}
    assert cmd.remark is None
    assert cmd.body == b""
    assert cmd.serialize_type == SerializeType.JSON
    assert not cmd.is_response
    assert not cmd.is_oneway


def test_spec_json_example_encodes() -> None:
    cmd = RemotingCommand(105, opaque=1, flag=0, ext_fields={"topic": "T"}, version=401)
    data = encode(cmd)
    # key order is free, so the prefix is exact and the header is equal as JSON
    assert data[:8] == bytes.fromhex("0000005e0000005a")
    assert len(data) == len(SPEC_JSON_FRAME)
    assert json.loads(data[8:]) == json.loads(SPEC_JSON_HEADER)


def test_spec_binary_example_encodes_byte_exact() -> None:
    cmd = RemotingCommand(
        105,
        opaque=1,
        flag=0,
        ext_fields={"topic": "T"},
        language=LanguageCode.JAVA,
        version=401,
        serialize_type=SerializeType.ROCKETMQ,
    )
    assert encode(cmd) == SPEC_BINARY_FRAME
    assert len(encode_header(cmd)) == 33


def test_spec_binary_example_decodes() -> None:
    cmd = decode_one(SPEC_BINARY_FRAME)
    assert cmd.code == 105
    assert cmd.language == LanguageCode.JAVA
    assert cmd.version == 401
    assert cmd.opaque == 1
    assert cmd.flag == 0
    assert cmd.remark is None
    assert cmd.ext_fields == {"topic": "T"}
    assert cmd.body == b""
    assert cmd.serialize_type == SerializeType.ROCKETMQ


@pytest.mark.parametrize(
    ("header", "language", "version", "opaque"),
    [
        (  # Java 4.9.8 (carries serializeTypeCurrentRPC, an unknown key to us)
            '{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":0,'
            '"serializeTypeCurrentRPC":"JSON","version":409}',
            LanguageCode.JAVA,
            409,
            0,
        ),
        (  # Go v2: always sends remark ""
            '{"code":105,"language":"GO","version":317,"opaque":1,"flag":0,"remark":"",'
            '"extFields":{"topic":"T"}}',
            LanguageCode.GO,
            317,
            1,
        ),
        (  # ali-ons
            '{"code":105,"language":"JAVA","opaque":1,"flag":0,"version":121,"extFields":{"topic":"T"}}',
            LanguageCode.JAVA,
            121,
            1,
        ),
    ],
)
def test_observed_client_headers(header: str, language: int, version: int, opaque: int) -> None:
    cmd = decode_one(json_frame(header))
    assert cmd.code == 105
    assert cmd.language == language
    assert cmd.version == version
    assert cmd.opaque == opaque
    assert cmd.ext_fields == {"topic": "T"}
    assert not cmd.remark


# --- JSON header details ----------------------------------------------------------------------------


def test_go_empty_remark_is_accepted() -> None:
    cmd = decode_one(
        json_frame(
            {
                "code": 0,
                "language": "GO",
                "version": 317,
                "opaque": 5,
                "flag": 1,
                "remark": "",
                "extFields": {"queueId": "3"},
            }
        )
    )
    assert cmd.remark in ("", None)
    assert cmd.is_response
    assert cmd.ext_fields == {"queueId": "3"}


def test_remark_is_decoded() -> None:
    cmd = decode_one(json_frame({"code": 1, "opaque": 5, "flag": 1, "remark": "boom \u00e9\u4e2d"}))
    assert cmd.remark == "boom \u00e9\u4e2d"


def test_ali_ons_ext_fields_normalised_to_strings() -> None:
    header = (
        '{"code":310,"language":"JAVA","opaque":9,"flag":0,"version":121,"extFields":'
        '{"a":"PG","e":0,"d":4,"g":1700000000000,"k":false,"m":true,"neg":-1,"nothing":null}}'
    )
    cmd = decode_one(json_frame(header))
    assert cmd.ext_fields == {
        "a": "PG",
        "e": "0",
        "d": "4",
        "g": "1700000000000",
        "k": "false",
        "m": "true",
        "neg": "-1",
    }
    assert all(isinstance(v, str) for v in cmd.ext_fields.values())
    assert "nothing" not in cmd.ext_fields


@pytest.mark.parametrize("ext", ["null", None])
def test_ext_fields_absent_or_null(ext: str | None) -> None:
    header = '{"code":34,"language":"JAVA","opaque":2,"flag":0,"version":409'
    header += "}" if ext is None else f',"extFields":{ext}}}'
    cmd = decode_one(json_frame(header))
    assert cmd.code == RequestCode.HEART_BEAT
    assert cmd.ext_fields == {}


def test_unknown_header_keys_are_ignored() -> None:
    cmd = decode_one(
        json_frame(
            {
                "code": 105,
                "opaque": 3,
                "flag": 0,
                "language": "JAVA",
                "version": 409,
                "serializeTypeCurrentRPC": "JSON",
                "somethingNew": {"nested": [1, 2, 3]},
                "x": None,
                "extFields": {"topic": "T"},
            }
        )
    )
    assert cmd.code == 105
    assert cmd.opaque == 3
    assert cmd.ext_fields == {"topic": "T"}


def test_missing_optional_header_keys_get_defaults() -> None:
    cmd = decode_one(json_frame({"code": 105}))
    assert cmd.code == 105
    assert cmd.opaque == 0
    assert cmd.flag == 0
    assert cmd.ext_fields == {}
    assert cmd.remark is None


@pytest.mark.parametrize(
    ("language", "expected"),
    [
        ("JAVA", LanguageCode.JAVA),
        ("GO", LanguageCode.GO),
        ("CPP", LanguageCode.CPP),
        ("PYTHON", LanguageCode.PYTHON),
        ("KLINGON", LanguageCode.OTHER),
        (9, LanguageCode.GO),
    ],
)
def test_language_by_name_or_ordinal(language: object, expected: int) -> None:
    cmd = decode_one(json_frame({"code": 105, "opaque": 1, "flag": 0, "language": language}))
    assert cmd.language == expected


def test_json_encoding_emits_only_string_ext_values_and_omits_null_remark() -> None:
    cmd = RemotingCommand(
        11, opaque=7, ext_fields={"queueId": "0", "unitMode": "false"}, language=LanguageCode.GO, version=317
    )
    header = json.loads(encode(cmd)[8:])
    assert header == {
        "code": 11,
        "language": "GO",
        "version": 317,
        "opaque": 7,
        "flag": 0,
        "extFields": {"queueId": "0", "unitMode": "false"},
    }
    assert "remark" not in header


def test_json_encoding_keeps_empty_remark_and_drops_empty_ext() -> None:
    header = json.loads(encode(RemotingCommand(0, flag=FLAG_RESPONSE, remark=""))[8:])
    assert header["remark"] == ""
    assert "extFields" not in header


def test_json_encoding_with_body() -> None:
    body = b"\x00\x01binary\xff" * 10
    data = encode(RemotingCommand(10, opaque=42, body=body))
    length, word = struct.unpack_from(">ii", data)
    hdr_len = word & 0xFFFFFF
    assert word >> 24 == SerializeType.JSON
    assert length == len(data) - 4 == 4 + hdr_len + len(body)
    assert data[8 + hdr_len :] == body
    head, body_part = encode_parts(RemotingCommand(10, opaque=42, body=body))
    assert head + bytes(body_part) == data
    assert decode_one(data).body == body


# --- binary header details ------------------------------------------------------------------------


def test_binary_header_with_remark_and_several_fields_byte_exact() -> None:
    cmd = RemotingCommand(
        1,
        opaque=-5,
        flag=FLAG_RESPONSE,
        remark="b\u00e9",
        ext_fields={"k": "v", "\u4e2d": ""},
        language=LanguageCode.GO,
        version=317,
        serialize_type=SerializeType.ROCKETMQ,
        body=b"xyz",
    )
    ext = (
        bytes.fromhex("0001")
        + b"k"
        + bytes.fromhex("00000001")
        + b"v"
        + bytes.fromhex("0003")
        + "\u4e2d".encode()
        + bytes.fromhex("00000000")
    )
    header = (
        struct.pack(">hbhii", 1, 9, 317, -5, 1)
        + struct.pack(">i", 3)
        + "b\u00e9".encode()
        + struct.pack(">i", len(ext))
        + ext
    )
    assert encode(cmd) == binary_frame(header, b"xyz")
    back = decode_one(binary_frame(header, b"xyz"))
    same_command(back, cmd)


def test_binary_empty_remark_decodes_as_none() -> None:
    cmd = RemotingCommand(0, flag=FLAG_RESPONSE, remark="", serialize_type=SerializeType.ROCKETMQ)
    data = encode(cmd)
    # remarkLen 0 (21-byte fixed part, no ext)
    assert data[8:] == struct.pack(">hbhiiii", 0, 0, cmd.version, 0, 1, 0, 0)
    assert decode_one(data).remark is None


@pytest.mark.parametrize(
    "header",
    [
        b"",  # nothing at all
        b"\x00\x69\x00\x01",  # truncated fixed part
        struct.pack(">hbhiii", 105, 0, 401, 1, 0, 50) + b"short",  # remark length past the header
        struct.pack(">hbhiii", 105, 0, 401, 1, 0, -1),  # negative remark length
        struct.pack(">hbhiiii", 105, 0, 401, 1, 0, 0, 100),  # ext length past the header
        struct.pack(">hbhiiii", 105, 0, 401, 1, 0, 0, -3),  # negative ext length
        struct.pack(">hbhiiii", 105, 0, 401, 1, 0, 0, 7) + b"\x00\x01k\x00\x00\x00\x09",  # value overrun
        struct.pack(">hbhiiii", 105, 0, 401, 1, 0, 0, 9) + b"\x00\x01k\x00\x00\x00\x01v\x00",  # stray byte
        struct.pack(">hbhiiii", 105, 0, 401, 1, 0, 0, 9) + b"\x00\x01k\x00\x00\x00\x01v\x00" + bytes(6),
        # key runs past the ext map
        struct.pack(">hbhiiii", 105, 0, 401, 1, 0, 0, 5) + b"\x00\x09kkkkkkkkk\x00\x00\x00\x00",
        struct.pack(">hbhiii", 105, 0, 401, 1, 0, 2) + b"\xff\xfe" + struct.pack(">i", 0),  # bad UTF-8
    ],
)
def test_malformed_binary_header_yields_header_error(header: bytes) -> None:
    err = decode_header_error(binary_frame(header))
    assert err.opaque is None


def test_unknown_serialize_type_yields_header_error() -> None:
    header = b'{"code":105}'
    data = struct.pack(">iI", 4 + len(header), (7 << 24) | len(header)) + header
    decode_header_error(data)


# --- header errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        b"{not json",
        b'{"code":105',
        b"\xff\xfe\x00",
        b"[1,2,3]",
        b'"just a string"',
        b"",
        b"null",
        b'{"code":105,"opaque":"x1"}',
        b'{"code":105,"opaque":true}',
        b'{"code":105,"opaque":1.5}',
    ],
)
def test_unusable_json_header_has_no_opaque(header: bytes) -> None:
    err = decode_header_error(json_frame(header))
    assert err.opaque is None


@pytest.mark.parametrize(
    ("header", "field"),
    [
        ({"code": "abc", "opaque": 77, "flag": 0}, "code"),
        ({"opaque": 77, "flag": 0}, "code"),
        ({"code": None, "opaque": 77, "flag": 0}, "code"),
        ({"code": 105, "opaque": 77, "flag": 0, "version": "v1"}, "version"),
        ({"code": 105, "opaque": 77, "flag": 0, "version": [401]}, "version"),
        ({"code": 105, "opaque": 77, "flag": 0, "extFields": ["topic", "T"]}, "extFields"),
        ({"code": 105, "opaque": 77, "flag": 0, "extFields": "topic=T"}, "extFields"),
        ({"code": False, "opaque": 77, "flag": 0}, "code"),
    ],
)
def test_wrong_field_types_carry_opaque(header: dict, field: str) -> None:
    err = decode_header_error(json_frame(header))
    assert err.opaque == 77
    assert err.flag == 0
    assert field in str(err)


def test_header_error_keeps_flag_for_oneway_requests() -> None:
    err = decode_header_error(json_frame({"code": "x", "opaque": 12, "flag": FLAG_ONEWAY}))
    assert err.opaque == 12
    assert err.flag == FLAG_ONEWAY


@pytest.mark.parametrize("bad", ["--1", "-", "\u00b2", "1-", ""])
def test_malformed_numeric_strings_yield_header_error(bad: str) -> None:
    """Numeric strings are tolerated (fastjson parses "105"), but junk must not escape as ValueError."""
    err = decode_header_error(json_frame({"code": bad, "opaque": 4, "flag": 0}))
    assert err.opaque == 4


def test_numeric_strings_are_accepted_like_fastjson() -> None:
    cmd = decode_one(json_frame({"code": "105", "opaque": "-3", "flag": "0", "version": "401"}))
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.version) == (105, -3, 0, 401)


def test_stream_stays_in_sync_after_header_error() -> None:
    good = encode(RemotingCommand(105, opaque=2, ext_fields={"topic": "T"}))
    data = json_frame(b"{broken") + good + json_frame({"code": "bad", "opaque": 3}) + good
    out = FrameDecoder().feed(data)
    assert [type(x) for x in out] == [HeaderError, RemotingCommand, HeaderError, RemotingCommand]
    assert out[1].ext_fields == {"topic": "T"}
    assert out[2].opaque == 3


def test_decode_header_direct() -> None:
    cmd = decode_header(SerializeType.JSON, SPEC_JSON_HEADER)
    assert cmd.ext_fields == {"topic": "T"}
    cmd = decode_header(SerializeType.ROCKETMQ, SPEC_BINARY_FRAME[8:])
    assert cmd.ext_fields == {"topic": "T"}
    with pytest.raises(HeaderError):
        decode_header(2, b"{}")


# --- frame-level errors -----------------------------------------------------------------------------


def test_frame_over_16_mib_is_rejected_from_its_prefix() -> None:
    decoder = FrameDecoder()
    with pytest.raises(FrameError):
        decoder.feed(struct.pack(">ii", MAX_FRAME_LENGTH + 1, 10))


def test_frame_length_prefix_alone_is_enough_to_reject() -> None:
    with pytest.raises(FrameError):
        FrameDecoder().feed(struct.pack(">I", 0xFFFFFFFF))  # negative as int32
    with pytest.raises(FrameError):
        FrameDecoder().feed(struct.pack(">i", 0x7FFFFFFF))


@pytest.mark.parametrize("length", [0, 1, 3, -1])
def test_frame_shorter_than_its_header_word_is_rejected(length: int) -> None:
    with pytest.raises(FrameError):
        FrameDecoder().feed(struct.pack(">ii", length, 0))


def test_header_length_past_the_frame_is_rejected() -> None:
    header = b'{"code":105}'
    data = struct.pack(">ii", 4 + len(header), len(header) + 1) + header + b"x"
    with pytest.raises(FrameError):
        FrameDecoder().feed(data)


def test_header_length_past_the_frame_is_rejected_for_binary() -> None:
    data = struct.pack(">iI", 4 + 2, (1 << 24) | 0xFFFFFF) + b"ab"
    with pytest.raises(FrameError):
        FrameDecoder().feed(data)


def test_large_frame_just_under_the_limit_decodes() -> None:
    body = bytes(range(256)) * (15 * 4096)  # 15 MiB
    data = encode(RemotingCommand(11, opaque=1, flag=FLAG_RESPONSE, body=body))
    decoder = FrameDecoder()
    out = []
    for i in range(0, len(data), 1 << 20):
        out += decoder.feed(data[i : i + (1 << 20)])
    assert len(out) == 1
    assert out[0].body == body
    assert decoder.buffered == 0


def test_encoding_a_frame_over_16_mib_raises() -> None:
    cmd = RemotingCommand(11, opaque=1, flag=FLAG_RESPONSE, body=bytes(MAX_FRAME_LENGTH))
    with pytest.raises(FrameError):
        encode(cmd)
    with pytest.raises(FrameError):
        encode_parts(cmd)


def test_custom_max_frame() -> None:
    data = encode(RemotingCommand(10, body=b"x" * 100))
    with pytest.raises(FrameError):
        FrameDecoder(max_frame=50).feed(data)
    assert len(FrameDecoder(max_frame=len(data)).feed(data)) == 1


# --- incremental decoding ---------------------------------------------------------------------------


def _sample_commands() -> list[RemotingCommand]:
    return [
        RemotingCommand(105, opaque=1, ext_fields={"topic": "T"}, version=401),
        RemotingCommand(0, opaque=1, flag=FLAG_RESPONSE, body=b'{"brokerDatas":[]}', remark="ok"),
        RemotingCommand(
            310,
            opaque=2,
            ext_fields={"a": "PG", "b": "T\u00e9"},
            body=b"\x00" * 300,
            serialize_type=SerializeType.ROCKETMQ,
            language=LanguageCode.GO,
            version=317,
        ),
        RemotingCommand(15, opaque=3, flag=FLAG_ONEWAY, ext_fields={"commitOffset": "12"}),
        RemotingCommand(
            1,
            opaque=4,
            flag=FLAG_RESPONSE,
            remark="\u4e2d\u6587 error",
            serialize_type=SerializeType.ROCKETMQ,
        ),
    ]


def test_byte_by_byte_feeding() -> None:
    cmds = _sample_commands()
    stream = b"".join(encode(c) for c in cmds)
    decoder = FrameDecoder()
    out: list = []
    for i in range(len(stream)):
        got = decoder.feed(stream[i : i + 1])
        out += got
        # a command is produced exactly when its last byte arrives, leaving nothing buffered
        assert (decoder.buffered == 0) == bool(got)
    assert len(out) == len(cmds)
    for got, want in zip(out, cmds, strict=True):
        same_command(got, want)
    assert decoder.buffered == 0


def test_many_frames_in_one_chunk() -> None:
    cmds = _sample_commands() * 50
    stream = b"".join(encode(c) for c in cmds)
    out = FrameDecoder().feed(stream)
    assert len(out) == len(cmds)
    for got, want in zip(out, cmds, strict=True):
        same_command(got, want)


def test_partial_trailing_frame_is_kept_for_the_next_feed() -> None:
    cmds = _sample_commands()
    stream = b"".join(encode(c) for c in cmds)
    cut = len(stream) - 5
    decoder = FrameDecoder()
    first = decoder.feed(stream[:cut])
    assert len(first) == len(cmds) - 1
    assert decoder.buffered > 0
    second = decoder.feed(memoryview(stream[cut:]))
    assert len(second) == 1
    same_command(second[0], cmds[-1])
    assert decoder.buffered == 0


def test_many_feeds_do_not_lose_bytes_across_compaction() -> None:
    # enough traffic to pass the internal 64 KiB compaction threshold with a frame straddling chunks
    cmds = [RemotingCommand(11, opaque=i, body=bytes([i % 256]) * (1000 + i)) for i in range(300)]
    stream = b"".join(encode(c) for c in cmds)
    decoder = FrameDecoder()
    out: list = []
    step = 7919
    for i in range(0, len(stream), step):
        out += decoder.feed(stream[i : i + step])
    assert [c.opaque for c in out] == list(range(300))
    for got, want in zip(out, cmds, strict=True):
        assert got.body == want.body


def test_memoryview_and_bytearray_input() -> None:
    data = encode(_sample_commands()[2])
    assert len(FrameDecoder().feed(bytearray(data))) == 1
    assert len(FrameDecoder().feed(memoryview(data))) == 1


# --- responses --------------------------------------------------------------------------------------


@pytest.mark.parametrize("stype", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_response_mirrors_request_serialize_type(stype: int) -> None:
    request = decode_one(
        encode(RemotingCommand(105, opaque=31, ext_fields={"topic": "T"}, serialize_type=stype))
    )
    assert request.serialize_type == stype
    response = request.response(ResponseCode.TOPIC_NOT_EXIST, "No topic route info in name server")
    assert response.serialize_type == stype
    assert response.opaque == 31
    assert response.is_response
    assert not response.is_oneway
    data = encode(response)
    assert data[4] == stype  # the serialize-type byte of the header word
    back = decode_one(data)
    assert back.serialize_type == stype
    assert back.opaque == 31
    assert back.code == ResponseCode.TOPIC_NOT_EXIST
    assert back.remark == "No topic route info in name server"
    assert back.is_response


def test_response_defaults_and_error_helper() -> None:
    req = RemotingCommand(10, opaque=99, flag=FLAG_ONEWAY, serialize_type=SerializeType.ROCKETMQ)
    ok = req.response(ext_fields={"msgId": "X", "queueId": "0"}, body=b"b")
    assert (ok.code, ok.opaque, ok.flag) == (ResponseCode.SUCCESS, 99, FLAG_RESPONSE)
    assert ok.ext_fields == {"msgId": "X", "queueId": "0"}
    assert ok.body == b"b"
    err = req.error(ResponseCode.SYSTEM_ERROR, "oops")
    assert (err.code, err.remark, err.opaque, err.serialize_type) == (1, "oops", 99, SerializeType.ROCKETMQ)
    assert err.is_response


def test_normalize_ext_fields_directly() -> None:
    assert frame.normalize_ext_fields(None) == {}
    assert frame.normalize_ext_fields({"t": True, "f": False, "n": None, "i": 12, "s": "x"}) == {
        "t": "true",
        "f": "false",
        "i": "12",
        "s": "x",
    }
    with pytest.raises(HeaderError):
        frame.normalize_ext_fields([1])
