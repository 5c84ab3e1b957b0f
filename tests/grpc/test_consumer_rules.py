"""The consumer side's pure rules (grpc/consumer.py, grpc/outgoing.py): long-polling time, invisible-time
bounds, which queues a receive pops, the proxy's answers for ack outcomes, filters, and a stored message
as a ReceiveMessage answer carries it."""

from __future__ import annotations

import zlib

import pytest

from tidemq.grpc.consumer import ack_status, check_invisible, polling_ms, receive_queues
from tidemq.grpc.outgoing import Delivery, message_type, receive_filter, to_grpc_message
from tidemq.grpc.proto import definition_pb2 as pb
from tidemq.grpc.status import GrpcStatusError
from tidemq.record import MessageExt, Prop, pack_host
from tidemq.store.pop import AckStatus


def test_polling_time_is_clamped_then_cut_to_the_deadline() -> None:
    assert polling_ms(1_000, None) == 5_000
    assert polling_ms(60_000, None) == 20_000
    assert polling_ms(15_000, 30_000) == 15_000
    assert polling_ms(15_000, 8_000) == 8_000  # the deadline leaves less: poll until it
    assert polling_ms(None, 30_000) == 15_000  # no request value: half the time remaining
    with pytest.raises(GrpcStatusError) as short:
        polling_ms(15_000, 3_000)
    assert short.value.code == pb.ILLEGAL_POLLING_TIME


def test_invisible_time_bounds() -> None:
    check_invisible(10_000, 10_000)
    check_invisible(0, 0)
    for ms, minimum in ((9_999, 10_000), (12 * 3600 * 1000 + 1, 0)):
        with pytest.raises(GrpcStatusError) as bad:
            check_invisible(ms, minimum)
        assert bad.value.code == pb.ILLEGAL_INVISIBLE_TIME


def test_a_receive_pops_every_queue_starting_in_turn() -> None:
    assert receive_queues(4, 0) == [0, 1, 2, 3]
    assert receive_queues(4, 6) == [2, 3, 0, 1]
    assert receive_queues(1, 5) == [0]


def test_ack_outcomes_as_the_proxy_answers_them() -> None:
    assert ack_status(AckStatus.OK, "ack").code == pb.OK
    assert ack_status(AckStatus.SUPERSEDED, "ack").code == pb.OK
    assert ack_status(AckStatus.ALREADY_ACKED, "ack").code == pb.OK
    expired = ack_status(AckStatus.EXPIRED, "ack")
    assert (expired.code, expired.message) == (pb.INVALID_RECEIPT_HANDLE, "receipt handle is expired")
    forged = ack_status(AckStatus.NOT_FOUND, "ack")
    assert (forged.code, forged.message) == (pb.INTERNAL_SERVER_ERROR, "ack failed: status is abnormal")
    stale = ack_status(AckStatus.SUPERSEDED, "change invisible time", stale_ok=False)
    assert stale.code == pb.INTERNAL_SERVER_ERROR


def test_tag_and_sql_filters() -> None:
    everything = receive_filter(pb.FilterExpression(type=pb.TAG, expression=" * "))
    assert not everything.needs_properties and everything.matches({})
    tags = receive_filter(pb.FilterExpression(type=pb.TAG, expression="TagA || TagB"))
    assert tags.tags == {"TagA", "TagB"} and tags.tag_codes is not None and len(tags.tag_codes) == 2
    assert (
        tags.matches({Prop.TAGS: "TagB"}) and not tags.matches({Prop.TAGS: "TagC"}) and not tags.matches({})
    )
    sql = receive_filter(pb.FilterExpression(type=pb.SQL, expression="color = 'red' AND n > 1"))
    assert sql.matches({"color": "red", "n": "2"}) and not sql.matches({"color": "red", "n": "1"})
    with pytest.raises(GrpcStatusError) as bad:
        receive_filter(pb.FilterExpression(type=pb.SQL, expression="color = "))
    assert bad.value.code == pb.ILLEGAL_FILTER_EXPRESSION


def test_a_stored_message_as_a_receiver_gets_it() -> None:
    msg = MessageExt(
        topic="t",
        body=b"hello",
        queue_id=2,
        queue_offset=7,
        born_timestamp=1_700_000_000_123,
        store_timestamp=1_700_000_000_456,
        born_host_raw=pack_host("10.0.0.1", 5555)[0],
        store_host_raw=pack_host("10.0.0.2", 10911)[0],
    )
    msg.properties = {
        Prop.UNIQ_KEY: "ID1",
        Prop.TAGS: "TagA",
        Prop.KEYS: "k1 k2",
        "__SHARDINGKEY": "order-1",
        "color": "red",
        "POP_CK": "x",
    }
    out = to_grpc_message(msg, Delivery("h 1", 3, 30_500), pb.Resource(name="t"))
    sp = out.system_properties
    assert out.body == b"hello" and dict(out.user_properties) == {"color": "red"}
    assert (sp.message_id, sp.tag, list(sp.keys), sp.message_group) == (
        "ID1",
        "TagA",
        ["k1", "k2"],
        "order-1",
    )
    assert sp.body_digest.type == pb.CRC32 and sp.body_digest.checksum == format(zlib.crc32(b"hello"), "08X")
    assert (sp.receipt_handle, sp.delivery_attempt, sp.queue_id, sp.queue_offset) == ("h 1", 3, 2, 7)
    assert (sp.invisible_duration.seconds, sp.invisible_duration.nanos) == (30, 500_000_000)
    assert sp.born_host == "10.0.0.1" and sp.store_host == "10.0.0.2:10911"
    assert sp.born_timestamp.ToMilliseconds() == 1_700_000_000_123 and sp.message_type == pb.FIFO


def test_message_type_from_properties() -> None:
    assert message_type({}) == pb.NORMAL
    assert message_type({Prop.TRAN_MSG: "true"}) == pb.TRANSACTION
    assert message_type({Prop.TIMER_DELIVER_MS: "1"}) == pb.DELAY
    assert message_type({Prop.DELAY: "3"}) == pb.DELAY
