"""Typed command headers (spec 1.4 parsing rules, 1.10, 2.3-2.7)."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.remoting import headers as h
from tidemq.remoting.headers import CommandHeader, HeaderFieldError, SendMessageRequestHeader

ALL_HEADER_CLASSES = sorted(
    (
        cls
        for cls in vars(h).values()
        if isinstance(cls, type) and issubclass(cls, CommandHeader) and cls is not CommandHeader
    ),
    key=lambda cls: cls.__name__,
)


def test_header_classes_were_found() -> None:
    assert len(ALL_HEADER_CLASSES) >= 15
    assert SendMessageRequestHeader in ALL_HEADER_CLASSES


# --- simple typed headers ---------------------------------------------------------------------------


def test_route_info_header() -> None:
    hdr = h.GetRouteInfoRequestHeader.from_ext({"topic": "T"})
    assert hdr.topic == "T"
    assert hdr.accept_standard_json_only is None
    assert hdr.to_ext() == {"topic": "T"}
    hdr = h.GetRouteInfoRequestHeader.from_ext({"topic": "T", "acceptStandardJsonOnly": "true", "bname": "x"})
    assert hdr.accept_standard_json_only is True
    assert hdr.to_ext() == {"topic": "T", "acceptStandardJsonOnly": "true"}


def test_register_broker_header() -> None:
    ext = {
        "brokerName": "broker-a",
        "brokerAddr": "10.0.0.1:10911",
        "clusterName": "DefaultCluster",
        "haServerAddr": "10.0.0.1:10912",
        "brokerId": "0",
        "compressed": "false",
        "bodyCrc32": "-12345",
    }
    hdr = h.RegisterBrokerRequestHeader.from_ext(ext)
    assert hdr == h.RegisterBrokerRequestHeader(
        broker_name="broker-a",
        broker_addr="10.0.0.1:10911",
        cluster_name="DefaultCluster",
        ha_server_addr="10.0.0.1:10912",
        broker_id=0,
        compressed=False,
        body_crc32=-12345,
    )
    assert hdr.to_ext() == ext
    # optional fields fall back to their defaults
    del ext["compressed"], ext["bodyCrc32"]
    hdr = h.RegisterBrokerRequestHeader.from_ext(ext)
    assert (hdr.compressed, hdr.body_crc32) == (False, 0)


def test_pull_message_header_from_go() -> None:
    # Go sends every field, empty strings included (spec 1.10)
    ext = {
        "consumerGroup": "CG",
        "topic": "T",
        "queueId": "2",
        "queueOffset": "100",
        "maxMsgNums": "32",
        "sysFlag": "6",
        "commitOffset": "0",
        "suspendTimeoutMillis": "20000",
        "subVersion": "0",
        "subscription": "",
        "expressionType": "",
        "bname": "",
    }
    hdr = h.PullMessageRequestHeader.from_ext(ext)
    assert hdr.consumer_group == "CG"
    assert (hdr.queue_id, hdr.queue_offset, hdr.max_msg_nums, hdr.sys_flag) == (2, 100, 32, 6)
    assert hdr.suspend_timeout_millis == 20000
    assert hdr.subscription is None
    assert hdr.expression_type is None
    assert hdr.bname is None


def test_pull_message_header_from_java() -> None:
    ext = {
        "consumerGroup": "CG",
        "topic": "T",
        "queueId": "0",
        "queueOffset": "9223372036854775807",
        "maxMsgNums": "32",
        "sysFlag": "3",
        "commitOffset": "-1",
        "suspendTimeoutMillis": "15000",
        "subVersion": "1700000000000",
        "subscription": "TagA || TagB",
        "expressionType": "TAG",
    }
    hdr = h.PullMessageRequestHeader.from_ext(ext)
    assert hdr.queue_offset == 2**63 - 1
    assert hdr.commit_offset == -1
    assert hdr.sub_version == 1700000000000
    assert hdr.subscription == "TagA || TagB"
    assert hdr.expression_type == "TAG"
    assert hdr.to_ext() == ext


def test_unregister_client_uses_explicit_wire_name() -> None:
    hdr = h.UnregisterClientRequestHeader.from_ext({"clientID": "10.0.0.9@123", "producerGroup": "PG"})
    assert hdr.client_id == "10.0.0.9@123"
    assert hdr.producer_group == "PG"
    assert hdr.consumer_group is None
    assert hdr.to_ext() == {"clientID": "10.0.0.9@123", "producerGroup": "PG"}
    with pytest.raises(HeaderFieldError, match="clientID"):
        h.UnregisterClientRequestHeader.from_ext({"clientId": "wrong-case"})


def test_send_response_header() -> None:
    hdr = h.SendMessageResponseHeader(msg_id="0A00000100002A9F0000000000000000", queue_id=1, queue_offset=7)
    ext = hdr.to_ext()
    assert ext == {"msgId": "0A00000100002A9F0000000000000000", "queueId": "1", "queueOffset": "7"}
    assert h.SendMessageResponseHeader.from_ext(ext) == hdr


def test_consumer_send_back_header() -> None:
    ext = {
        "offset": "1024",
        "group": "CG",
        "delayLevel": "0",
        "originMsgId": "",
        "originTopic": "T",
        "unitMode": "false",
        "maxReconsumeTimes": "16",
    }
    hdr = h.ConsumerSendMsgBackRequestHeader.from_ext(ext)
    assert hdr.offset == 1024
    assert hdr.origin_msg_id is None
    assert hdr.origin_topic == "T"
    assert hdr.max_reconsume_times == 16
    assert hdr.unit_mode is False


def test_create_topic_header_defaults() -> None:
    hdr = h.CreateTopicRequestHeader.from_ext(
        {"topic": "T", "defaultTopic": "TBW102", "readQueueNums": "8", "writeQueueNums": "8", "perm": "6"}
    )
    assert hdr.topic_filter_type == "SINGLE_TAG"
    assert hdr.order is False
    assert hdr.topic_sys_flag is None
    ext = hdr.to_ext()
    assert ext["order"] == "false"
    assert ext["topicFilterType"] == "SINGLE_TAG"
    assert "topicSysFlag" not in ext


def test_to_ext_values_are_all_strings() -> None:
    hdr = h.ConsumerSendMsgBackRequestHeader(offset=5, group="G", delay_level=3, unit_mode=True)
    ext = hdr.to_ext()
    assert ext == {"offset": "5", "group": "G", "delayLevel": "3", "unitMode": "true"}
    assert all(isinstance(v, str) for v in ext.values())


def test_unknown_ext_fields_are_ignored() -> None:
    hdr = h.QueueRequestHeader.from_ext(
        {"topic": "T", "queueId": "1", "bname": "b", "AccessKey": "ak", "Signature": "sig"}
    )
    assert hdr == h.QueueRequestHeader(topic="T", queue_id=1)


# --- SEND_MESSAGE / SEND_MESSAGE_V2 -------------------------------------------------------------------

LONG_EXT = {
    "producerGroup": "PG",
    "topic": "T",
    "defaultTopic": "TBW102",
    "defaultTopicQueueNums": "4",
    "queueId": "1",
    "sysFlag": "0",
    "bornTimestamp": "1700000000123",
    "flag": "0",
    "properties": "UNIQ_KEY\x01ABC\x02WAIT\x01true\x02TAGS\x01TagA",
    "reconsumeTimes": "0",
    "unitMode": "false",
    "batch": "false",
    "maxReconsumeTimes": "16",
    "bname": "broker-a",
}
COMPACT_EXT = {
    "a": "PG",
    "b": "T",
    "c": "TBW102",
    "d": "4",
    "e": "1",
    "f": "0",
    "g": "1700000000123",
    "h": "0",
    "i": "UNIQ_KEY\x01ABC\x02WAIT\x01true\x02TAGS\x01TagA",
    "j": "0",
    "k": "false",
    "l": "16",
    "m": "false",
    "n": "broker-a",
}
EXPECTED_SEND = SendMessageRequestHeader(
    producer_group="PG",
    topic="T",
    default_topic="TBW102",
    default_topic_queue_nums=4,
    queue_id=1,
    sys_flag=0,
    born_timestamp=1700000000123,
    flag=0,
    properties="UNIQ_KEY\x01ABC\x02WAIT\x01true\x02TAGS\x01TagA",
    reconsume_times=0,
    unit_mode=False,
    batch=False,
    max_reconsume_times=16,
    bname="broker-a",
)


def test_send_message_long_names() -> None:
    hdr = SendMessageRequestHeader.from_ext(LONG_EXT)
    assert hdr == EXPECTED_SEND
    assert hdr.to_ext() == LONG_EXT


def test_send_message_v2_compact_names() -> None:
    hdr = SendMessageRequestHeader.from_ext(COMPACT_EXT, compact=True)
    assert hdr == EXPECTED_SEND
    assert hdr.to_compact_ext() == COMPACT_EXT


def test_spec_compact_name_table() -> None:
    table = {
        "a": "producer_group",
        "b": "topic",
        "c": "default_topic",
        "d": "default_topic_queue_nums",
        "e": "queue_id",
        "f": "sys_flag",
        "g": "born_timestamp",
        "h": "flag",
        "i": "properties",
        "j": "reconsume_times",
        "k": "unit_mode",
        "l": "max_reconsume_times",
        "m": "batch",
        "n": "bname",
    }
    for key, attr in table.items():
        # flip just one field and check it lands in the matching attribute
        ext = dict(COMPACT_EXT)
        if attr in ("unit_mode", "batch"):
            ext[key], want = "true", True
        elif isinstance(getattr(EXPECTED_SEND, attr), int):
            ext[key], want = "77", 77
        else:
            ext[key], want = "changed", "changed"
        hdr = SendMessageRequestHeader.from_ext(ext, compact=True)
        assert getattr(hdr, attr) == want, key
        assert hdr.to_compact_ext()[key] == ext[key]


def test_ali_ons_compact_header_a_to_l() -> None:
    # ali-ons sends a..l only, with strings after frame normalisation
    ext = {k: v for k, v in COMPACT_EXT.items() if k not in ("m", "n")}
    hdr = SendMessageRequestHeader.from_ext(ext, compact=True)
    assert hdr.batch is False
    assert hdr.bname is None
    assert hdr.max_reconsume_times == 16
    compact = hdr.to_compact_ext()
    assert "n" not in compact
    assert compact["m"] == "false"


def test_batch_flag_in_compact_names() -> None:
    hdr = SendMessageRequestHeader.from_ext({**COMPACT_EXT, "m": "true"}, compact=True)
    assert hdr.batch is True


def test_compact_names_need_compact_flag() -> None:
    with pytest.raises(HeaderFieldError, match="producerGroup"):
        SendMessageRequestHeader.from_ext(COMPACT_EXT)


def test_compact_missing_required_names_the_field() -> None:
    ext = dict(COMPACT_EXT)
    del ext["b"]
    with pytest.raises(HeaderFieldError, match="topic"):
        SendMessageRequestHeader.from_ext(ext, compact=True)


def test_compact_ext_only_uses_a_to_n() -> None:
    minimal = SendMessageRequestHeader(
        producer_group="PG",
        topic="T",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=-1,
        sys_flag=0,
        born_timestamp=1,
        flag=0,
    )
    compact = minimal.to_compact_ext()
    assert set(compact) <= set("abcdefghijklmn")
    assert compact["e"] == "-1"
    assert "i" not in compact  # properties None
    assert SendMessageRequestHeader.from_ext(compact, compact=True) == minimal


_SEND_EDGES = [
    *("0", "1", "4", "16", "-1", "", "true", "TRUE", "false", " 1", "1_0", "\u0663", "x"),
    *("999999999", "2147483647", "2147483648", "0000000001", "9223372036854775807", "9223372036854775808"),
]
_SEND_VALUES = st.one_of(
    st.sampled_from(_SEND_EDGES), st.integers(-(2**70), 2**70).map(str), st.text(max_size=4)
)
_SEND_KEYS = st.sampled_from([*"abcdefghijklmn", "topic", "reconsumeTimes", "bname", "unrelated"])


def _reading(read: typing.Callable[[], SendMessageRequestHeader]) -> object:
    try:
        return read()
    except HeaderFieldError as exc:
        return ("refused", str(exc))


def _both_readings(ext: dict[str, str]) -> tuple[object, object]:
    """``from_compact_ext`` and ``from_ext(compact=True)`` of ``ext``: a header, or the refusal."""
    return (
        _reading(lambda: SendMessageRequestHeader.from_compact_ext(ext)),
        _reading(lambda: SendMessageRequestHeader.from_ext(ext, compact=True)),
    )


@pytest.mark.parametrize(
    "ext",
    [COMPACT_EXT, {**COMPACT_EXT, "d": "16", "e": "12", "f": "48", "j": "3", "l": "16"}],
    ids=["usual", "more-than-nine-digits-in-all"],
)
def test_from_compact_ext_reads_a_usual_header_without_the_generic_path(
    ext: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What Java, Go and tidemq send takes the fast path (else the twin tests below would pass with a
    fast path that never runs)."""
    expected = SendMessageRequestHeader.from_ext(ext, compact=True)

    def generic(*args: object, **kwargs: object) -> SendMessageRequestHeader:
        raise AssertionError("took the generic path")

    monkeypatch.setattr(SendMessageRequestHeader, "from_ext", generic)
    assert SendMessageRequestHeader.from_compact_ext(ext) == expected


@pytest.mark.parametrize("key", [*"abcdefghijklmn", "reconsumeTimes"])
def test_from_compact_ext_reads_each_edge_as_from_ext(key: str) -> None:
    for value in _SEND_EDGES:
        for ext in ({**COMPACT_EXT, key: value}, {k: v for k, v in COMPACT_EXT.items() if k != key}):
            fast, generic = _both_readings(ext)
            assert fast == generic, (key, value)


@settings(max_examples=400)
@given(
    overrides=st.dictionaries(_SEND_KEYS, _SEND_VALUES, max_size=5),
    dropped=st.sets(st.sampled_from(list("abcdefghijklmn")), max_size=3),
)
def test_from_compact_ext_reads_as_from_ext(overrides: dict[str, str], dropped: set[str]) -> None:
    """The broker's field-by-field reading of SEND_MESSAGE_V2 agrees with the generic one on anything:
    the same header, or the same refusal."""
    ext = {k: v for k, v in {**COMPACT_EXT, **overrides}.items() if k not in dropped}
    fast, generic = _both_readings(ext)
    assert fast == generic


# --- errors -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("missing", ["consumerGroup", "topic", "queueId", "commitOffset"])
def test_missing_required_field_is_named(missing: str) -> None:
    ext = {"consumerGroup": "CG", "topic": "T", "queueId": "0", "commitOffset": "5"}
    del ext[missing]
    with pytest.raises(HeaderFieldError, match=missing):
        h.UpdateConsumerOffsetRequestHeader.from_ext(ext)


def test_empty_required_number_counts_as_missing() -> None:
    with pytest.raises(HeaderFieldError, match="queueId"):
        h.QueueRequestHeader.from_ext({"topic": "T", "queueId": ""})


def test_empty_required_string_is_kept() -> None:
    # Java would see "" (not null) for a required String; only optional strings become absent
    assert h.TopicRequestHeader.from_ext({"topic": ""}).topic == ""


def test_header_field_error_is_a_value_error() -> None:
    assert issubclass(HeaderFieldError, ValueError)


@pytest.mark.parametrize(
    "raw",
    [
        "abc",
        "1.5",
        "0x10",
        "1e3",
        "--1",
        "1-",
        "one",
        "\u00b2",
        "1_000",
        " 7",
        "7 ",
        "+",
        "-",
        "9223372036854775808",
        "-9223372036854775809",
    ],
)
def test_unparsable_number_names_the_field(raw: str) -> None:
    """Integer.parseInt / Long.parseLong reject all of these (no whitespace, no '_', 64-bit at most)."""
    with pytest.raises(HeaderFieldError, match="queueOffset"):
        _parse_queue_offset(raw)
    # the same value in a different field names that field instead
    with pytest.raises(HeaderFieldError, match="timestamp"):
        h.SearchOffsetRequestHeader.from_ext({"topic": "T", "queueId": "0", "timestamp": raw})


def _parse_queue_offset(raw: str) -> None:
    h.PullMessageRequestHeader.from_ext(
        {
            "consumerGroup": "CG",
            "topic": "T",
            "queueId": "0",
            "queueOffset": raw,
            "maxMsgNums": "32",
            "sysFlag": "0",
            "commitOffset": "0",
            "suspendTimeoutMillis": "0",
            "subVersion": "0",
        }
    )


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("0", 0),
        ("-1", -1),
        ("+5", 5),
        ("007", 7),
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
    ],
)
def test_numbers_java_accepts(raw: str, value: int) -> None:
    hdr = h.ViewMessageRequestHeader.from_ext({"offset": raw})
    assert hdr.offset == value


def test_unparsable_optional_number_also_raises() -> None:
    ext = {"offset": "1", "group": "CG", "delayLevel": "0", "maxReconsumeTimes": "sixteen"}
    with pytest.raises(HeaderFieldError, match="maxReconsumeTimes"):
        h.ConsumerSendMsgBackRequestHeader.from_ext(ext)


# --- Go empty strings, Java booleans ----------------------------------------------------------------


def test_go_empty_optional_fields_are_absent() -> None:
    ext = {
        "offset": "1",
        "group": "CG",
        "delayLevel": "0",
        "originMsgId": "",
        "originTopic": "",
        "unitMode": "",
        "maxReconsumeTimes": "",
        "bname": "",
    }
    hdr = h.ConsumerSendMsgBackRequestHeader.from_ext(ext)
    assert hdr == h.ConsumerSendMsgBackRequestHeader(offset=1, group="CG", delay_level=0)
    assert hdr.to_ext() == {"offset": "1", "group": "CG", "delayLevel": "0", "unitMode": "false"}


def test_go_empty_optional_consume_stats_topic() -> None:
    assert h.GetConsumeStatsRequestHeader.from_ext({"consumerGroup": "CG", "topic": ""}).topic is None


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("true", True),
        ("TRUE", True),
        ("True", True),
        ("tRuE", True),
        ("false", False),
        ("FALSE", False),
        ("1", False),
        ("yes", False),
        ("t", False),
        ("on", False),
        ("truee", False),
        (" true", False),
        ("true ", False),
        ("\ttrue\n", False),
        ("tru", False),
    ],
)
def test_java_boolean_parse_semantics(raw: str, value: bool) -> None:
    """Boolean.parseBoolean: true iff the string equalsIgnoreCase "true" (no trimming)."""
    hdr = h.CreateTopicRequestHeader.from_ext(
        {
            "topic": "T",
            "defaultTopic": "TBW102",
            "readQueueNums": "1",
            "writeQueueNums": "1",
            "perm": "6",
            "order": raw,
        }
    )
    assert hdr.order is value
    send = SendMessageRequestHeader.from_ext({**COMPACT_EXT, "k": raw, "m": raw}, compact=True)
    assert send.unit_mode is value
    assert send.batch is value


def test_empty_optional_boolean_keeps_default() -> None:
    hdr = h.GetRouteInfoRequestHeader.from_ext({"topic": "T", "acceptStandardJsonOnly": ""})
    assert hdr.accept_standard_json_only is None
    hdr2 = SendMessageRequestHeader.from_ext({**LONG_EXT, "unitMode": "", "batch": ""})
    assert hdr2.unit_mode is False
    assert hdr2.batch is False


# --- property: every header class round-trips ------------------------------------------------------

_INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
_TEXT = st.text(min_size=1, max_size=20)


def _value_strategy(hint: object, optional: bool) -> st.SearchStrategy:
    kinds = [t for t in typing.get_args(hint) if t is not type(None)] or [hint]
    if typing.get_origin(hint) is typing.Annotated:
        kinds = [hint]
    kind = kinds[0]
    base: st.SearchStrategy
    if kind is bool:
        base = st.booleans()
    elif typing.get_origin(kind) is typing.Annotated:
        base = _INT64  # Java Long
    elif kind is int:
        base = _INT32  # Java Integer
    else:
        base = _TEXT
    return st.one_of(st.none(), base) if optional and type(None) in typing.get_args(hint) else base


@st.composite
def any_header(draw: st.DrawFn) -> CommandHeader:
    cls = draw(st.sampled_from(ALL_HEADER_CLASSES))
    hints = typing.get_type_hints(cls, include_extras=True)
    kwargs = {}
    for f in dataclasses.fields(cls):
        optional = f.default is not dataclasses.MISSING
        if optional and draw(st.booleans()):
            continue  # leave the default
        kwargs[f.name] = draw(_value_strategy(hints[f.name], optional))
    return cls(**kwargs)


@settings(max_examples=300, deadline=None)
@given(any_header())
def test_every_header_round_trips_through_ext(hdr: CommandHeader) -> None:
    ext = hdr.to_ext()
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in ext.items())
    assert type(hdr).from_ext(ext) == hdr
    if isinstance(hdr, SendMessageRequestHeader):
        assert SendMessageRequestHeader.from_ext(hdr.to_compact_ext(), compact=True) == hdr


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("999999999", 999_999_999),
        ("2147483647", 2**31 - 1),
        ("-2147483648", -(2**31)),
        ("00000000000000000000042", 42),
        ("\u0661\u0662", 12),  # Arabic-Indic digits: int() and Java's Character.digit both read them
    ],
)
def test_integer_fields_take_every_number_that_fits_however_it_is_written(raw: str, value: int) -> None:
    """The plain-digits shortcut in ``from_ext`` decides nothing on its own: longer or signed numbers
    still parse as Java parses them."""
    base = {"topic": "T", "queueId": raw, "timestamp": raw}
    parsed = h.SearchOffsetRequestHeader.from_ext(base)
    assert (parsed.queue_id, parsed.timestamp) == (value, value)


def test_integer_fields_are_range_checked_like_java() -> None:
    """Java Integer fields reject values past 32 bits; Long fields take 64."""
    base = {"topic": "T", "queueId": "0", "timestamp": str(2**40)}
    assert h.SearchOffsetRequestHeader.from_ext(base).timestamp == 2**40
    with pytest.raises(HeaderFieldError, match="'queueId' must be a 32-bit integer"):
        h.SearchOffsetRequestHeader.from_ext(base | {"queueId": str(2**31)})
    with pytest.raises(HeaderFieldError, match="'timestamp' must be a long"):
        h.SearchOffsetRequestHeader.from_ext(base | {"timestamp": str(2**63)})
