"""Property tests of the record layer: its decoders fail only with ``MessageDecodeError`` whatever they are
handed, and a record decodes to every field it was encoded from.

That each hand-optimised decoder and builder gives its reference twin's answer is tests/record/
test_fast_twins.py.
"""

from __future__ import annotations

import contextlib
import ipaddress
import struct
import zlib
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.record.strategies import ANY_INT32, ANY_INT64, MANY, PROPERTY_TEXT, RECORD_LIKE_BYTES, SOME
from tidemq.record import (
    BatchItem,
    MessageDecodeError,
    SysFlag,
    decode_batch,
    decode_record,
    encode_batch,
    encode_properties,
    encode_record,
    iter_records,
)
from tidemq.record.layout import MIN_RECORD_SIZE

# --- the decoders raise only MessageDecodeError -----------------------------------------------------


@MANY
@given(RECORD_LIKE_BYTES, st.booleans(), st.booleans())
def test_record_decoders_raise_only_message_decode_error(data: bytes, decompress: bool, crc: bool) -> None:
    with contextlib.suppress(MessageDecodeError):
        decode_record(data, decompress=decompress, check_crc=crc)
    with contextlib.suppress(MessageDecodeError):
        for msg in iter_records(data, decompress=decompress):
            assert msg.store_size >= MIN_RECORD_SIZE


@MANY
@given(st.binary(max_size=300), st.integers(0, 400))
def test_decode_record_at_random_position(data: bytes, pos: int) -> None:
    with contextlib.suppress(MessageDecodeError):
        decode_record(data, pos)


@st.composite
def batch_like_bytes(draw: st.DrawFn) -> bytes:
    if draw(st.booleans()):
        return draw(st.binary(max_size=200))
    item = st.builds(BatchItem, ANY_INT32, st.binary(max_size=10), st.text(max_size=10))
    items = draw(st.lists(item, max_size=4))
    data = bytearray(encode_batch(items))
    for _ in range(draw(st.integers(0, 4))):
        if data:
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return bytes(data[: draw(st.integers(0, len(data)))]) if draw(st.booleans()) else bytes(data)


@MANY
@given(batch_like_bytes())
def test_decode_batch_raises_only_message_decode_error(data: bytes) -> None:
    try:
        items = decode_batch(data)
    except MessageDecodeError:
        return
    assert all(isinstance(item, BatchItem) for item in items)


# --- round trip ------------------------------------------------------------------------------------

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
def record_fields(draw: st.DrawFn) -> dict[str, Any]:
    topic = draw(st.text(max_size=40).filter(lambda t: len(t.encode()) <= 127))
    born, born_text = draw(st.one_of(_IPV4, _IPV6))
    store, store_text = draw(st.one_of(_IPV4, _IPV6))
    compressed = draw(st.booleans())
    body = draw(st.binary(max_size=200))
    # only bits the encoder does not own: compression/v6 are derived from the other arguments
    sys_flag = draw(ANY_INT32) & ~(SysFlag.COMPRESSED | SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6)
    if compressed:
        sys_flag |= SysFlag.COMPRESSED
    return dict(
        topic=topic,
        queue_id=draw(ANY_INT32),
        body=body,
        compressed=compressed,
        props=draw(st.dictionaries(PROPERTY_TEXT, PROPERTY_TEXT, max_size=5)),
        flag=draw(ANY_INT32),
        sys_flag=sys_flag,
        born_timestamp=draw(ANY_INT64),
        born=born,
        born_text=born_text,
        store_timestamp=draw(ANY_INT64),
        store=store,
        store_text=store_text,
        reconsume_times=draw(ANY_INT32),
        prepared=draw(ANY_INT64),
        queue_offset=draw(ANY_INT64),
        commit_log_offset=draw(ANY_INT64),
    )


@SOME
@given(st.lists(record_fields(), min_size=1, max_size=2))
def test_record_round_trip(recs: list[dict[str, Any]]) -> None:
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
