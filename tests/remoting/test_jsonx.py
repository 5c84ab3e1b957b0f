"""fastjson-compatible JSON (spec 2.9): bare numeric keys, object keys, and the object-key emitter."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.remoting.jsonx import LenientJSONError, dumps_object_keys, loads, object_key


def test_bare_numeric_keys() -> None:
    assert loads(b'{"brokerAddrs":{0:"a:1"}}') == {"brokerAddrs": {0: "a:1"}}
    assert loads('{"brokerAddrs":{0:"a:1"}}') == {"brokerAddrs": {0: "a:1"}}


def test_fastjson_route_data() -> None:
    text = (
        '{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"broker-a",'
        '"cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a",'
        '"perm":6,"readQueueNums":4,"topicSynFlag":0,"writeQueueNums":4}]}'
    )
    data = loads(text.encode())
    assert data["brokerDatas"][0]["brokerAddrs"] == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}
    assert data["queueDatas"][0]["perm"] == 6
    assert data["filterServerTable"] == {}


def test_consumer_offset_file_form() -> None:
    assert loads('{"offsetTable":{"T@CG":{0:15,1:0},"%RETRY%CG@CG":{-1:3}}}') == {
        "offsetTable": {"T@CG": {0: 15, 1: 0}, "%RETRY%CG@CG": {-1: 3}},
    }


def test_object_keys() -> None:
    data = loads(b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:42}}')
    key = object_key(brokerName="b", queueId=0, topic="T")
    assert data == {"offsetTable": {key: 42}}
    assert dict(next(iter(data["offsetTable"]))) == {"brokerName": "b", "queueId": 0, "topic": "T"}


def test_object_key_field_order_does_not_matter() -> None:
    a = loads('{{"topic":"T","queueId":1,"brokerName":"b"}:1}')
    b = loads('{{"brokerName":"b","queueId":1,"topic":"T"}:1}')
    assert a == b == {object_key(topic="T", queueId=1, brokerName="b"): 1}


def test_object_keys_with_nested_values_and_whitespace() -> None:
    text = """
    { "offsetTable" : {
        { "brokerName" : "b" , "queueId" : 0 , "topic" : "T" } : { "brokerOffset" : 10, "consumerOffset" : 7,
                                                                   "lastTimestamp" : 1700000000000 },
        {"brokerName":"b","queueId":1,"topic":"T"}:{"brokerOffset":3,"consumerOffset":3,"lastTimestamp":0}
      },
      "consumeTps" : 1.5 }
    """
    data = loads(text)
    assert data["consumeTps"] == 1.5
    table = data["offsetTable"]
    assert table[object_key(brokerName="b", queueId=0, topic="T")]["consumerOffset"] == 7
    assert table[object_key(brokerName="b", queueId=1, topic="T")] == {
        "brokerOffset": 3,
        "consumerOffset": 3,
        "lastTimestamp": 0,
    }


def test_lenient_strings_escapes_and_scalars() -> None:
    data = loads('{1:"a\\"b\\\\c\\u00e9\\n",2:[true,false,null,-3,2.5e3,"x,y:}"],3:{}, 4:[]}')
    assert data == {1: 'a"b\\c\u00e9\n', 2: [True, False, None, -3, 2500.0, "x,y:}"], 3: {}, 4: []}


@pytest.mark.parametrize(
    "doc",
    [
        {"a": 1, "b": [1, 2, {"c": None}], "d": "\u4e2d\u6587", "e": True, "f": -1.25},
        [],
        {},
        "s",
        0,
        None,
    ],
)
def test_standard_json_still_works(doc: object) -> None:
    text = json.dumps(doc)
    assert loads(text) == doc
    assert loads(text.encode()) == doc


@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        b"   ",
        b"{",
        b"}",
        b'{"a":}',
        b'{"a" 1}',
        b'{"a":1,,}',
        b"{,}",
        b"[1,2",
        b"[1 2]",
        b'{"a":1}x',
        b'{0:"a"} {1:"b"}',
        b"hello",
        b"{hello:1}",
        b"{[1]:2}",
        b'{"a":"unterminated}',
        b'{"a":"bad escape \\q"}',
        b"{1:}",
        b"{1 2}",
        b'{0:"a:1" 1:"b"}',
        b'{{"a":1}}',
        b'{{"a":1}:}',
        b'{{"a":[1]}:1}',  # object key whose value is unhashable
        b"{{1:2}:3}",  # object key with non-string keys
        b"\xff\xfe{}",
        b"[" * 5000 + b"]" * 5000,  # deeper than any real body: must fail cleanly, not overflow the stack
        b"{0:" * 3000,
    ],
)
def test_garbage_raises(garbage: bytes) -> None:
    with pytest.raises(ValueError):  # LenientJSONError, or UnicodeDecodeError for bad UTF-8
        loads(garbage)


def test_syntax_garbage_raises_lenient_error() -> None:
    for text in ['{0:"a"', "{0 1}", "{[1]:2}", '{{"a":[1]}:1}', "[" * 5000]:
        with pytest.raises(LenientJSONError):
            loads(text)


# --- emitter ----------------------------------------------------------------------------------------


def test_dumps_object_keys_fastjson_form() -> None:
    table = {"offsetTable": {object_key(topic="T", queueId=0, brokerName="b"): 42}}
    out = dumps_object_keys(table)
    assert out == b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:42}}'
    assert loads(out) == table


def test_dumps_numeric_keys_are_quoted() -> None:
    out = dumps_object_keys({"brokerAddrs": {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}})
    assert json.loads(out) == {"brokerAddrs": {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"}}


def test_dumps_plain_values_are_standard_json() -> None:
    doc = {"a": [1, 2.5, None, True, 'x\u00e9"\\'], "b": {"c": []}, "t": (1, 2)}
    assert json.loads(dumps_object_keys(doc)) == {
        "a": [1, 2.5, None, True, 'x\u00e9"\\'],
        "b": {"c": []},
        "t": [1, 2],
    }


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=10),
)
_KEY_FIELDS = st.dictionaries(
    st.text(min_size=1, max_size=8),
    st.one_of(st.text(max_size=8), st.integers(-(2**31), 2**31 - 1), st.booleans()),
    min_size=1,
    max_size=4,
)
_KEYS = st.one_of(st.text(max_size=10), _KEY_FIELDS.map(lambda d: object_key(**d)))
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_KEYS, inner, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=250, deadline=None)
@given(_VALUES)
def test_dumps_object_keys_round_trips_through_lenient_reader(value: object) -> None:
    assert loads(dumps_object_keys(value)) == value


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=60), st.text(alphabet='{}[]:,"0123 -.aetrnul\\', max_size=60)))
def test_lenient_reader_only_raises_value_errors(data: bytes | str) -> None:
    with contextlib.suppress(ValueError):
        loads(data)
