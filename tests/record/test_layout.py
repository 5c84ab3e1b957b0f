"""The named positions, sizes and formats of ``tidemq.record.layout`` describe one and the same layout."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.record.strategies import ANY_INT32, ANY_INT64, HOSTS
from tidemq.record import MAGIC_MESSAGE, encode_record, key_prefix
from tidemq.record import layout as L


def test_prefix_positions_follow_the_prefix_format() -> None:
    formats = "iIiiiqqiq"
    positions = [
        L.POS_TOTAL_SIZE, L.POS_MAGIC, L.POS_BODY_CRC, L.POS_QUEUE_ID, L.POS_FLAG, L.POS_QUEUE_OFFSET,
        L.POS_PHYSICAL_OFFSET, L.POS_SYSFLAG, L.POS_BORN_TIMESTAMP, L.POS_BORN_HOST,
    ]  # fmt: skip
    assert positions == [struct.calcsize(">" + formats[:i]) for i in range(len(formats) + 1)]
    assert L.RECORD_PREFIX.format == ">" + formats
    assert L.SIZE_AND_MAGIC.format == ">" + formats[:2]
    assert L.QUEUE_AND_PHYSICAL_OFFSETS.size == L.POS_SYSFLAG - L.POS_QUEUE_OFFSET


def test_the_ipv4_head_is_record_head_of_two_ipv4_hosts() -> None:
    assert L.record_head(L.HOST_V4_SIZE, L.HOST_V4_SIZE).format == L.HEAD_V4.format
    assert L.body_length_pos(0) + L.INT32.size == L.HEAD_SIZE_V4
    assert len(encode_record(topic="", queue_id=0, body=b"", properties="")) == L.MIN_RECORD_SIZE
    assert bytes((127, 0, 0, 1)) + L.INT32.pack(0) == L.LOOPBACK_HOST


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=L.HEAD_SIZE_V4, max_size=L.HEAD_SIZE_V4))
def test_the_body_fields_format_unpacks_a_subset_of_the_ipv4_head(data: bytes) -> None:
    total, magic, _crc, _qid, _flag, queue_offset, _phys, sys_flag, _born_ts, _born, store_ts, *rest = (
        L.HEAD_V4.unpack(data)
    )
    assert L.HEAD_V4_BODY_FIELDS.unpack(data) == (total, magic, queue_offset, sys_flag, store_ts, rest[-1])


@settings(max_examples=100, deadline=None)
@given(HOSTS, HOSTS, ANY_INT64, ANY_INT32, ANY_INT64, st.binary(max_size=20))
def test_positions_read_back_what_encode_record_wrote(
    born: bytes, store: bytes, store_ts: int, reconsume: int, queue_offset: int, body: bytes
) -> None:
    record = bytes(
        encode_record(
            topic="T", queue_id=3, body=body, properties="", born_host=born, store_host=store,
            store_timestamp=store_ts, reconsume_times=reconsume, queue_offset=queue_offset,
            commit_log_offset=77,
        )
    )  # fmt: skip
    (sys_flag,) = L.INT32.unpack_from(record, L.POS_SYSFLAG)
    assert L.host_sizes(sys_flag) == (len(born), len(store))
    assert L.SIZE_AND_MAGIC.unpack_from(record) == (len(record), MAGIC_MESSAGE)
    assert L.QUEUE_AND_PHYSICAL_OFFSETS.unpack_from(record, L.POS_QUEUE_OFFSET) == (queue_offset, 77)
    assert record[L.POS_BORN_HOST : L.POS_BORN_HOST + len(born)] == born
    ts_at = L.store_timestamp_pos(sys_flag)
    assert L.INT64.unpack_from(record, ts_at) == (store_ts,)
    store_at = ts_at + L.TIMESTAMP_SIZE
    assert record[store_at : store_at + len(store)] == store
    body_len_at = L.body_length_pos(sys_flag)
    suffix_at = body_len_at + L.INT32.size - L.RECORD_SUFFIX.size
    assert suffix_at == store_at + len(store)
    assert L.RECORD_SUFFIX.unpack_from(record, suffix_at) == (reconsume, 0, len(body))
    body_at = body_len_at + L.INT32.size
    assert record[body_at : body_at + len(body)] == body
    assert L.body_crc(body) == L.INT32.unpack_from(record, L.POS_BODY_CRC)[0]
    assert record[body_at + len(body) :] == L.topic_field("T") + L.properties_field(b"")


def test_key_prefix_is_the_key_then_the_name_value_separator() -> None:
    assert key_prefix("TAGS") == b"TAGS\x01"
    assert key_prefix("\u952e") == "\u952e\x01".encode()
