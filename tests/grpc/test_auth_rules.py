"""The gRPC endpoint's ACL rules without a server: the SDKs' signature, the authorization header, which
permission each request needs, and the order of the checks (tidemq/grpc/auth.py)."""

from __future__ import annotations

import pytest

from tidemq.acl import PUB, SUB, AclRules
from tidemq.acl.file import load_acl_config
from tidemq.grpc.auth import needed_resources, parse_authorization, peer_ip, sign, validate
from tidemq.grpc.proto import definition_pb2 as pb
from tidemq.grpc.proto import service_pb2 as spb
from tidemq.grpc.status import GrpcStatusError

DATE = "20250101T120000Z"
RULES = AclRules.from_config(
    load_acl_config(
        """\
globalWhiteRemoteAddresses:
  - 10.10.*.*
accounts:
  - accessKey: writer
    secretKey: writer-secret
    whiteRemoteAddress: 192.168.0.7
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - Orders=PUB
    groupPerms:
      - Billing=SUB
"""
    )
)
SEND = spb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name="Orders"), body=b"x")])


def headers(ak: str = "writer", sk: str = "writer-secret") -> dict[str, str]:
    auth = f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sign(sk, DATE)}"
    return {"authorization": auth, "x-mq-date-time": DATE}


def refused(metadata: dict[str, str], request: object, ip: str = "127.0.0.1") -> tuple[int, str]:
    with pytest.raises(GrpcStatusError) as exc:
        validate(RULES, metadata, ip, "Rpc", request)
    return exc.value.code, exc.value.message


def test_signature_is_hex_hmac_sha1_of_the_date_time() -> None:
    # Computed with `openssl dgst -sha1 -hmac writer-secret`, as the SDKs sign.
    assert sign("writer-secret", DATE) == "0ac564186756b6c9c03e5781ecc7c15eeca322b5"


def test_authorization_header_parsing() -> None:
    assert parse_authorization(headers()["authorization"]) == ("writer", sign("writer-secret", DATE))
    assert parse_authorization("MQv2-HMAC-SHA1 Credential=ak/2025/region,Signature=ab") == ("ak", "ab")
    for bad in (
        "Bearer x",
        "MQv2-HMAC-SHA1",
        "MQv2-HMAC-SHA1 Credential",
        "MQv2-HMAC-SHA1 Credential=, Signature=a",
    ):
        with pytest.raises(GrpcStatusError) as exc:
            parse_authorization(bad)
        assert exc.value.code == pb.UNAUTHORIZED


def test_needed_resources_per_request() -> None:
    assert needed_resources("SendMessage", SEND) == {"Orders": PUB}
    receive = spb.ReceiveMessageRequest(
        group=pb.Resource(name="Billing"), message_queue=pb.MessageQueue(topic=pb.Resource(name="Orders"))
    )
    assert needed_resources("ReceiveMessage", receive) == {"%RETRY%Billing": SUB, "Orders": SUB}
    ack = spb.AckMessageRequest(group=pb.Resource(name="Billing"), topic=pb.Resource(name="Orders"))
    assert needed_resources("AckMessage", ack) == {"%RETRY%Billing": SUB, "Orders": SUB}
    end = spb.EndTransactionRequest(topic=pb.Resource(name="Orders"))
    assert needed_resources("EndTransaction", end) == {"Orders": PUB}
    settings = spb.TelemetryCommand(
        settings=pb.Settings(
            subscription=pb.Subscription(
                group=pb.Resource(name="Billing"),
                subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name="Orders"))],
            )
        )
    )
    assert needed_resources("Telemetry", settings) == {"%RETRY%Billing": SUB, "Orders": SUB}
    assert needed_resources("QueryRoute", spb.QueryRouteRequest(topic=pb.Resource(name="Orders"))) == {}
    assert needed_resources("Heartbeat", spb.HeartbeatRequest()) == {}


def test_validate_in_javas_order() -> None:
    validate(RULES, headers(), "127.0.0.1", "SendMessage", SEND)
    validate(RULES, {}, "10.10.3.4", "SendMessage", SEND)  # globally white: no headers needed
    validate(RULES, headers(sk="wrong"), "192.168.0.7", "SendMessage", SEND)  # the account's white address
    assert refused({}, SEND) == (
        pb.UNAUTHORIZED,
        "Rpc needs the authorization and x-mq-date-time headers: ACL is on",
    )
    assert refused(headers("ghost"), SEND) == (pb.UNAUTHORIZED, "No acl config for ghost")
    assert refused(headers(sk="wrong"), SEND) == (
        pb.UNAUTHORIZED,
        "Check signature failed for accessKey=writer",
    )
    other = spb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name="Payments"))])
    assert refused(headers(), other) == (
        pb.FORBIDDEN,
        "Rpc: No default permission for topic:Payments, accessKey=writer",
    )
    receive = spb.ReceiveMessageRequest(
        group=pb.Resource(name="Billing"), message_queue=pb.MessageQueue(topic=pb.Resource(name="Orders"))
    )
    code, message = refused(headers(), receive)  # Orders is PUB only for this account
    assert code == pb.FORBIDDEN and "topic:Orders" in message


def test_peer_ip() -> None:
    assert peer_ip("ipv4:127.0.0.1:5555") == "127.0.0.1"
    assert peer_ip("ipv6:[::1]:5555") == "::1"
    assert peer_ip("ipv6:[::ffff:10.0.0.1]:5555") == "10.0.0.1"
