"""Hypothesis over every sans-IO decoder, from random bytes and from mutated valid encodings.

The only allowed outcomes are a value or the decoder's own error type. Sizes are bounded so a hang
shows as a deadline failure. Frame and record decoders already have structured property tests
(tests/remoting/test_fuzz_decoders.py, tests/record/test_fuzz_records.py); here they get inputs mutated
from valid encodings, and the decoders those files do not cover get both kinds.
``TIDEMQ_CHAOS=long`` runs 20 times the examples.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.chaos.chaos_support import LONG
from tidemq.acl.file import AclFileError, load_acl_config
from tidemq.filter.sql92 import SqlEvaluationError, SqlParseError, compile_sql
from tidemq.nsq.compression import CompressionError, Deflate, Snappy
from tidemq.nsq.nsqd.verbs import check_publish_line
from tidemq.nsq.protocol import (
    Command,
    CommandParser,
    FrameParser,
    NSQError,
    decode_message,
    decode_mpub,
    encode_command,
    encode_frame,
    encode_message,
    encode_mpub,
)
from tidemq.record.batch import BatchItem, decode_batch, encode_batch
from tidemq.record.codec import decode_record, encode_record, iter_records
from tidemq.record.layout import MessageDecodeError
from tidemq.remoting import jsonx
from tidemq.remoting.bodies import BodyError, json_object
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.frame import FrameDecoder, FrameError, HeaderError, encode
from tidemq.store.pop_handle import InvalidReceiptHandle, ReceiptHandle

pytestmark = pytest.mark.chaos

FUZZ = settings(
    max_examples=4000 if LONG else 200,
    deadline=2000,  # a hang, not a slow machine: every input is small
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def mutated(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    """A valid encoding, broken: bit flips, a cut, a lying 32-bit field, inserted bytes, or a splice."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "cut", "lie", "insert", "splice"]))
        at = draw(st.integers(0, len(data)))
        if op == "flip" and data:
            data[min(at, len(data) - 1)] ^= 1 << draw(st.integers(0, 7))
        elif op == "cut":
            del data[at:]
        elif op == "lie" and len(data) >= 4:
            at = min(at, len(data) - 4)
            value = draw(
                st.sampled_from([0, 1, 0x7FFFFFFF, 0xFFFFFFFF, 0x80000000, len(data), len(data) + 1])
            )
            data[at : at + 4] = value.to_bytes(4, "big")
        elif op == "insert":
            data[at:at] = draw(st.binary(max_size=16))
        else:
            other = draw(st.sampled_from(seeds))
            data = data[:at] + other[draw(st.integers(0, len(other))) :]
    return bytes(data)


def inputs(seeds: list[bytes]) -> st.SearchStrategy[bytes]:
    return st.one_of(st.binary(max_size=512), mutated(seeds))


def outcome(decode: Callable[[], object], *allowed: type[BaseException]) -> None:
    with contextlib.suppress(allowed):
        decode()


# --- remoting frames, headers and JSON bodies -----------------------------------------------------

REMOTING_SEEDS = [
    encode(RemotingCommand(10, opaque=7, ext_fields={"topic": "T", "queueId": "0"}, body=b"hello")),
    encode(RemotingCommand(34, opaque=8, body=orjson.dumps({"clientID": "c", "consumerDataSet": []}))),
    encode(RemotingCommand(105, opaque=9, ext_fields={"topic": "T"}, serialize_type=1)),
    encode(RemotingCommand(0, opaque=9, flag=1, remark="ok", body=b"\x00" * 8, serialize_type=1)),
]


@FUZZ
@given(inputs([*REMOTING_SEEDS, b"".join(REMOTING_SEEDS)]))
def test_remoting_frame_decoder(data: bytes) -> None:
    def decode() -> None:
        for item in FrameDecoder(max_frame=1 << 16).feed(data):
            assert isinstance(item, RemotingCommand | HeaderError)

    outcome(decode, FrameError)


BODY_SEEDS = [
    b'{"clientID":"c@1","producerDataSet":[{"groupName":"P"}],"consumerDataSet":[]}',
    b'{"consumerGroup":"g","clientId":"c","mqSet":[{"topic":"t","brokerName":"b","queueId":0}]}',
    b'{"groupName":"g","retryQueueNums":1,"consumeEnable":true}',
    b'{{"topic":"t","brokerName":"b","queueId":0}:12,"x":[1,2.5,null,"s"]}',  # fastjson's object keys
    b"[]",
    b"null",
]


@FUZZ
@given(inputs(BODY_SEEDS))
def test_json_bodies(data: bytes) -> None:
    outcome(lambda: jsonx.loads(data), ValueError)  # LenientJSONError, or UnicodeDecodeError for bad UTF-8
    outcome(lambda: json_object(data, "fuzzed"), BodyError)


# --- the stored record and the producer's batch ----------------------------------------------------

RECORD_SEEDS = [
    bytes(encode_record(topic="T", queue_id=1, body=b"hello", properties="KEYS\x01k\x02TAGS\x01a\x02")),
    bytes(encode_record(topic="topic-%RETRY%", queue_id=0, body=b"", properties="", sys_flag=1)),
    encode_batch([BatchItem(0, b"a", "UNIQ_KEY\x01u\x02"), BatchItem(3, b"bb", "")]),
]


@FUZZ
@given(inputs([*RECORD_SEEDS, RECORD_SEEDS[0] + RECORD_SEEDS[1]]))
def test_record_and_batch_decoders(data: bytes) -> None:
    outcome(lambda: decode_record(data, check_crc=True), MessageDecodeError)
    outcome(lambda: list(iter_records(data)), MessageDecodeError)
    outcome(lambda: decode_batch(data), MessageDecodeError)


# --- NSQ: the server's command parser, MPUB bodies, the client's frame parser, compression ---------

NSQD_SEEDS = [
    b"  V2" + encode_command("IDENTIFY", body=b'{"client_id":"c","feature_negotiation":true}'),
    b"  V2" + encode_command("PUB", "t", body=b"hello") + encode_mpub("t", [b"a", b"bb"]),
    b"  V2SUB t c\nRDY 10\nFIN 0123456789abcdef\nREQ 0123456789abcdef 10\nTOUCH 0123456789abcdef\nNOP\nCLS\n",
    b"  V2" + encode_command("DPUB", "t", "100", body=b"x"),
]


@FUZZ
@given(inputs(NSQD_SEEDS), st.booleans())
def test_nsqd_command_parser(data: bytes, announce: bool) -> None:
    parser = CommandParser(max_body_size=4096, max_msg_size=1024, announce_bodies=announce)
    for item in parser.feed(data):
        if isinstance(item, Command) and item.name in (b"PUB", b"MPUB", b"DPUB"):
            outcome(lambda item=item: check_publish_line(item, 3_600_000), NSQError)
            if item.name == b"MPUB" and item.body is not None:
                outcome(lambda item=item: decode_mpub(item.body or b"", 1024), NSQError)


MESSAGE = encode_message(1_700_000_000_000_000_000, 1, b"0123456789abcdef", b"body")
CLIENT_SEEDS = [encode_frame(0, b"OK"), encode_frame(1, b"E_INVALID bad"), encode_frame(2, MESSAGE)]


@FUZZ
@given(inputs([*CLIENT_SEEDS, b"".join(CLIENT_SEEDS)]))
def test_nsq_client_frame_parser(data: bytes) -> None:
    def decode() -> None:
        for kind, frame in FrameParser(max_frame=1 << 16).feed(data):
            if kind == 2:
                outcome(lambda frame=frame: decode_message(frame), NSQError)

    outcome(decode, NSQError)
    outcome(lambda: FrameParser(max_frame=1 << 16).feed_messages(data, lambda *a: a), NSQError)


SNAPPY_SEEDS = [Snappy().compress(b"PUB t\n\x00\x00\x00\x05hello" * 20), Snappy().compress(bytes(range(256)))]
DEFLATE_SEEDS = [Deflate().compress(b"NOP\n" * 50), Deflate(9).compress(bytes(range(256)) * 4)]


@FUZZ
@given(inputs(SNAPPY_SEEDS), inputs(DEFLATE_SEEDS))
def test_stream_decompressors(snappy: bytes, deflate: bytes) -> None:
    outcome(lambda: Snappy().decompress(snappy), CompressionError)
    outcome(lambda: Deflate().decompress(deflate), CompressionError)


# --- text formats: the ACL file, SQL92 selectors, receipt handles ------------------------------------

ACL_SEED = """globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*
accounts:
  - accessKey: RocketMQ
    secretKey: "12345678"
    whiteRemoteAddress: 192.168.0.*
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [topicA=DENY, topicB=PUB|SUB]
    groupPerms:
      - groupA=DENY  # a comment
"""
SQL_SEEDS = [
    "a > 1 AND b = 'x' OR c IS NOT NULL",
    "(x BETWEEN 1 AND 10) AND NOT (y IN ('a', 'b')) AND z <> 2.5E3",
    "TAGS LIKE 'ab%' AND s NOT LIKE '_c' OR flag = TRUE",
]
HANDLE_SEEDS = [ReceiptHandle(0, 1_700_000_000_000, 30_000, 1, 2, 42, "topic").encode()]


def _text(seeds: list[str]) -> st.SearchStrategy[str]:
    raw = mutated([s.encode() for s in seeds]).map(lambda b: b.decode("utf-8", errors="replace"))
    return st.one_of(st.text(max_size=300), raw)


@FUZZ
@given(_text([ACL_SEED]))
def test_acl_file_reader(text: str) -> None:
    outcome(lambda: load_acl_config(text), AclFileError)


@FUZZ
@given(_text(SQL_SEEDS), st.dictionaries(st.sampled_from("abcxyzs"), st.text(max_size=5), max_size=4))
def test_sql92_parser_and_evaluation(text: str, props: dict[str, str]) -> None:
    try:
        expression = compile_sql(text)
    except SqlParseError:
        return
    outcome(lambda: expression.evaluate(props), SqlEvaluationError)
    assert expression.matches(props) in (True, False)


@FUZZ
@given(_text(HANDLE_SEEDS))
def test_receipt_handle_decode(text: str) -> None:
    outcome(lambda: ReceiptHandle.decode(text), InvalidReceiptHandle)
