"""The plain-ACL signature both sides compute (Java's AclUtils.calSignature / AclClientRPCHook)."""

from __future__ import annotations

from tidemq.remoting.acl_signature import calc_signature, sign_request, signed_content
from tidemq.remoting.command import RemotingCommand

# Checked outside Python: printf 'RocketMQ12topicAhello' | openssl dgst -sha1 -hmac 12345678 -binary | base64
VECTOR = "p6Srnsemtl/ni7AUksmxXJcc+pM="


def test_content_is_values_by_key_then_body_without_signature() -> None:
    ext = {"topic": "topicA", "Signature": "x", "AccessKey": "RocketMQ", "queueId": "12"}
    assert signed_content(ext, b"hello") == b"RocketMQ12topicAhello"


def test_fixed_vector() -> None:
    assert calc_signature(b"RocketMQ12topicAhello", "12345678") == VECTOR


def test_sign_request_adds_access_key_and_signature() -> None:
    request = RemotingCommand(10, ext_fields={"topic": "topicA", "queueId": "12"}, body=b"hello")
    sign_request(request, "RocketMQ", "12345678")
    assert request.ext_fields["AccessKey"] == "RocketMQ"
    assert request.ext_fields["Signature"] == VECTOR


def test_resigning_replaces_the_old_signature() -> None:
    request = RemotingCommand(10, ext_fields={"topic": "topicA", "queueId": "12"}, body=b"hello")
    sign_request(request, "RocketMQ", "12345678")
    sign_request(request, "RocketMQ", "12345678")
    assert request.ext_fields["Signature"] == VECTOR


def test_keys_sort_in_java_order() -> None:
    # Upper case sorts before lower case, as String.compareTo does.
    assert signed_content({"b": "2", "B": "1", "a": "3"}, b"") == b"132"


def test_matches_javas_acl_client_rpc_hook_on_a_send() -> None:
    # Java 4.9.8's AclClientRPCHook(SessionCredentials("RocketMQ", "12345678")) on a SEND_MESSAGE_V2 with
    # these header fields and body "hello" (rocketmq-acl-4.9.8.jar run once by hand) gave this Signature.
    ext = {"a": "PG", "b": "topicA", "c": "TBW102", "d": "4", "e": "1", "f": "0", "g": "1700000000000"}
    ext |= {"h": "0", "i": "k\x01v\x02", "j": "0", "k": "false", "m": "false"}
    request = RemotingCommand(310, ext_fields=ext, body=b"hello")
    sign_request(request, "RocketMQ", "12345678")
    assert request.ext_fields["Signature"] == "p990LzvK4qs6/ncoS2CJdz4kPUQ="
