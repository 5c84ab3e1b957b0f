"""The pure rules of the gRPC front-end: a gRPC message as stored properties, the send checks' codes, the
message group → queue choice, the Telemetry settings answer and the route's queues."""

from __future__ import annotations

import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from tidemq.grpc.convert import (
    check_message,
    consistent_hash,
    java_string_hash,
    queue_for_group,
    stored_shape,
)
from tidemq.grpc.proto import definition_pb2 as pb
from tidemq.grpc.routes import answer_endpoints, assignments, route_queues
from tidemq.grpc.service import born_host
from tidemq.grpc.settings import GroupSettings, ServerSettings, merged_settings
from tidemq.grpc.status import GrpcStatusError, status
from tidemq.record import LOOPBACK_HOST, pack_host


def message(body: bytes = b"hi", **system: object) -> pb.Message:
    sp = pb.SystemProperties(message_id="01ABC", message_type=pb.NORMAL)
    for key, value in system.items():
        if isinstance(value, list):
            getattr(sp, key).extend(value)
        elif hasattr(value, "CopyFrom"):
            getattr(sp, key).CopyFrom(value)
        else:
            setattr(sp, key, value)
    return pb.Message(topic=pb.Resource(name="t"), body=body, system_properties=sp)


def test_stored_properties_are_what_a_remoting_consumer_reads() -> None:
    msg = message(
        tag="TagA",
        keys=["k1", "k2"],
        message_group="g1",
        delivery_attempt=2,
        trace_context="tc",
        born_timestamp=Timestamp(seconds=1700000000, nanos=123_000_000),
    )
    msg.user_properties["color"] = "red"
    shape = stored_shape(msg, "t")
    assert shape.properties == {
        "color": "red",
        "TAGS": "TagA",
        "KEYS": "k1 k2",
        "UNIQ_KEY": "01ABC",
        "RECONSUME_TIME": "2",
        "PGROUP": "t",
        "__SHARDINGKEY": "g1",
        "TRACE_CONTEXT": "tc",
    }
    assert shape.born_timestamp == 1700000000123


def test_delivery_time_and_transaction_properties() -> None:
    delayed = stored_shape(message(delivery_timestamp=Timestamp(seconds=1800000000, nanos=5_000_000)), "t")
    assert delayed.properties["TIMER_DELIVER_MS"] == "1800000000005"
    assert stored_shape(message(), "t", now_ms=42).born_timestamp == 42  # no birth time: the server's
    half = stored_shape(
        message(message_type=pb.TRANSACTION, orphaned_transaction_recovery_duration=Duration(seconds=30)),
        "t",
    )
    assert half.properties["TRAN_MSG"] == "true" and half.properties["CHECK_IMMUNITY_TIME_IN_SECONDS"] == "30"


@pytest.mark.parametrize(
    ("msg", "code"),
    [
        (message(b""), pb.MESSAGE_BODY_EMPTY),
        (message(b"x" * 11), pb.MESSAGE_BODY_TOO_LARGE),
        (message(message_id=""), pb.ILLEGAL_MESSAGE_ID),
        (message(tag="a|b"), pb.ILLEGAL_MESSAGE_TAG),
        (message(tag="  "), pb.ILLEGAL_MESSAGE_TAG),
        (message(keys=[" "]), pb.ILLEGAL_MESSAGE_KEY),
        (message(message_group="g" * 65), pb.ILLEGAL_MESSAGE_GROUP),
    ],
)
def test_bad_messages_get_the_proxys_codes(msg: pb.Message, code: int) -> None:
    with pytest.raises(GrpcStatusError) as caught:
        check_message(msg, max_body=10)
    assert caught.value.code == code


def test_a_user_property_may_not_take_a_system_name() -> None:
    msg = message()
    msg.user_properties["UNIQ_KEY"] = "forged"
    with pytest.raises(GrpcStatusError) as caught:
        check_message(msg, max_body=10)
    assert caught.value.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY and "UNIQ_KEY" in caught.value.message
    check_message(message(tag="ok", keys=["k"], message_group="g"), max_body=10)


def test_message_group_queue_is_javas_choice() -> None:
    assert java_string_hash("hello") == 99162322  # "hello".hashCode()
    assert java_string_hash("polygenelubricants") == -(2**31)  # the famous Integer.MIN_VALUE hash
    # Guava's consistentHash: stable, in range, and growing the buckets only moves keys to the new one.
    for key in range(-500, 500):
        spread = [consistent_hash(key, n) for n in range(1, 20)]
        assert all(0 <= b < n for b, n in zip(spread, range(1, 20), strict=True))
        for n in range(1, 19):
            assert spread[n] in (spread[n - 1], n)
    assert queue_for_group("order-7", 8) == queue_for_group("order-7", 8)
    assert len({queue_for_group(f"order-{i}", 8) for i in range(200)}) == 8


def test_born_host_from_the_grpc_peer() -> None:
    assert born_host("ipv4:10.1.2.3:4567") == pack_host("10.1.2.3", 4567)[0]
    assert born_host("ipv6:[::1]:4567") == LOOPBACK_HOST
    assert born_host("unix:/tmp/sock") == LOOPBACK_HOST


def test_producer_settings_answer() -> None:
    client = pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="t")]))
    client.user_agent.language = pb.PYTHON
    out = merged_settings(client, ServerSettings(max_message_size=1000), None)
    assert out.publishing.max_body_size == 1000 and out.publishing.validate_message_type
    assert out.backoff_policy.max_attempts == 3
    backoff = out.backoff_policy.exponential_backoff
    assert (backoff.initial.ToMilliseconds(), backoff.max.ToMilliseconds(), backoff.multiplier) == (
        10,
        1000,
        2,
    )
    assert out.user_agent.language == pb.PYTHON and [t.name for t in out.publishing.topics] == ["t"]
    assert not out.metric.on


def test_consumer_settings_answer() -> None:
    client = pb.Settings(
        client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(group=pb.Resource(name="g"))
    )
    out = merged_settings(client, ServerSettings(), GroupSettings(fifo=True, retry_max_times=4))
    sub = out.subscription
    assert (sub.fifo, sub.receive_batch_size, sub.long_polling_timeout.ToSeconds()) == (True, 32, 20)
    assert out.backoff_policy.max_attempts == 5
    steps = [d.ToSeconds() for d in out.backoff_policy.customized_backoff.next]
    assert steps[:4] == [1, 5, 10, 30] and steps[-1] == 7200


def test_route_queues_split_by_permission() -> None:
    broker = pb.Broker(name="b")
    topic = pb.Resource(name="t")
    rw = route_queues(topic, 6, read_queues=4, write_queues=2, broker=broker)
    assert [(q.id, q.permission) for q in rw] == [
        (0, pb.READ),
        (1, pb.READ),
        (2, pb.READ_WRITE),
        (3, pb.READ_WRITE),
    ]
    assert all(list(q.accept_message_types) == [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION] for q in rw)
    assert [q.permission for q in route_queues(topic, 2, 4, 4, broker)] == [pb.WRITE] * 4
    assert [q.permission for q in route_queues(topic, 0, 4, 4, broker)] == [pb.NONE] * 4
    assert [a.message_queue.id for a in assignments(topic, 6, 4, broker, fifo=False)] == [-1]
    assert [a.message_queue.id for a in assignments(topic, 6, 3, broker, fifo=True)] == [0, 1, 2]
    assert assignments(topic, 2, 4, broker, fifo=False) == []


def test_endpoints_answer_the_address_the_client_used() -> None:
    asked = pb.Endpoints(scheme=pb.DOMAIN_NAME, addresses=[pb.Address(host="mq.example", port=1)])
    out = answer_endpoints(asked, "127.0.0.1", 8081)
    assert out.scheme == pb.DOMAIN_NAME and [(a.host, a.port) for a in out.addresses] == [
        ("mq.example", 8081)
    ]
    fallback = answer_endpoints(pb.Endpoints(), "127.0.0.1", 8081)
    assert [(a.host, a.port) for a in fallback.addresses] == [("127.0.0.1", 8081)]


def test_status_message_defaults_to_the_codes_name() -> None:
    assert status(pb.TOPIC_NOT_FOUND) == pb.Status(code=pb.TOPIC_NOT_FOUND, message="TOPIC_NOT_FOUND")
    assert pb.TOPIC_NOT_FOUND == 40402 and pb.MESSAGE_BODY_TOO_LARGE == 41301
