"""The plain ACL's decisions: permissions, defaults, DENY, admin-only codes, white addresses, signatures."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from tidemq.acl import ANY, DENY, PUB, SUB, AclRules, AclWatcher, check_permission, parse_perm
from tidemq.acl.address import address_matcher
from tidemq.acl.file import load_acl_config
from tidemq.broker.acl import AclService, validate
from tidemq.broker.acl_rules import AclDenied, needed_resources
from tidemq.remoting.acl_signature import sign_request
from tidemq.remoting.codes import RequestCode
from tidemq.remoting.command import RemotingCommand

ACL = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      - groupA=DENY
  - accessKey: rocketmq2
    secretKey: 87654321
    whiteRemoteAddress: 192.168.1.*
    admin: true
"""
CLIENT = "127.0.0.1"


@pytest.fixture
def rules() -> AclRules:
    return AclRules.from_config(load_acl_config(ACL))


def signed(
    code: int, ext: dict[str, str], body: bytes = b"", ak: str = "RocketMQ", sk: str = "12345678"
) -> RemotingCommand:
    request = RemotingCommand(code, ext_fields=dict(ext), body=body)
    sign_request(request, ak, sk)
    return request


def denied(rules: AclRules, request: RemotingCommand, ip: str = CLIENT) -> str:
    with pytest.raises(AclDenied) as info:
        validate(rules, request, ip)
    return str(info.value)


def test_permission_bits_are_javas() -> None:
    assert (DENY, ANY, PUB, SUB) == (1, 2, 4, 8)
    assert parse_perm("PUB|SUB") == parse_perm("SUB|PUB") == PUB | SUB
    assert parse_perm("nonsense") == DENY
    assert check_permission(PUB, PUB | SUB) and not check_permission(PUB, SUB)
    assert not check_permission(SUB, SUB | DENY)
    assert check_permission(ANY, SUB) and not check_permission(ANY, DENY)


def test_send_needs_pub_on_the_topic(rules: AclRules) -> None:
    validate(rules, signed(RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": "topicB"}), CLIENT)
    remark = denied(rules, signed(RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": "topicC"}))
    assert remark == "No default permission for topic:topicC, accessKey=RocketMQ"
    remark = denied(rules, signed(RequestCode.SEND_MESSAGE, {"producerGroup": "pg", "topic": "topicA"}))
    assert "topic:topicA" in remark


def test_default_topic_perm_applies_to_unlisted_topics(rules: AclRules) -> None:
    remark = denied(rules, signed(RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": "other"}))
    assert remark == "No default permission for topic:other, accessKey=RocketMQ"


def test_pull_needs_sub_on_topic_and_group(rules: AclRules) -> None:
    validate(rules, signed(RequestCode.PULL_MESSAGE, {"topic": "topicC", "consumerGroup": "g1"}), CLIENT)
    remark = denied(rules, signed(RequestCode.PULL_MESSAGE, {"topic": "topicC", "consumerGroup": "groupA"}))
    assert remark == "No default permission for group:groupA, accessKey=RocketMQ"


def test_heartbeat_needs_sub_on_groups_and_their_topics(rules: AclRules) -> None:
    body = {
        "clientID": "c",
        "producerDataSet": [],
        "consumerDataSet": [
            {"groupName": "g1", "subscriptionDataSet": [{"topic": "topicC"}, {"topic": "topicA"}]}
        ],
    }
    request = RemotingCommand(RequestCode.HEART_BEAT, body=orjson.dumps(body))
    assert needed_resources(request) == {"%RETRY%g1": SUB, "topicC": SUB, "topicA": SUB}
    sign_request(request, "RocketMQ", "12345678")
    assert "topic:topicA" in denied(rules, request)


def test_admin_only_codes(rules: AclRules) -> None:
    remark = denied(rules, signed(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "topicB"}))
    assert remark == "Need admin permission for request code=17, but accessKey=RocketMQ is not"
    admin = signed(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "x"}, ak="rocketmq2", sk="87654321")
    validate(rules, admin, CLIENT)


def test_missing_unknown_and_forged_credentials(rules: AclRules) -> None:
    bare = RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext_fields={"b": "topicB"})
    assert denied(rules, bare) == "No accessKey is configured"
    unknown = signed(RequestCode.SEND_MESSAGE_V2, {"b": "topicB"}, ak="nobody", sk="12345678")
    assert denied(rules, unknown) == "No acl config for nobody"
    forged = signed(RequestCode.SEND_MESSAGE_V2, {"b": "topicB"}, sk="wrong-secret")
    assert denied(rules, forged) == "Check signature failed for accessKey=RocketMQ"
    tampered = signed(RequestCode.SEND_MESSAGE_V2, {"b": "topicB"})
    tampered.body = b"changed"
    assert "Check signature failed" in denied(rules, tampered)


def test_white_addresses_pass_without_signature(rules: AclRules) -> None:
    bare = RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext_fields={"b": "topicA"})
    validate(rules, bare, "10.10.103.7")  # global white list
    own = RemotingCommand(RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields={"AccessKey": "rocketmq2"})
    validate(rules, own, "192.168.1.9")  # the account's own white address
    assert "Check signature failed" in denied(rules, own, "192.168.2.9")


@pytest.mark.parametrize(
    ("pattern", "inside", "outside"),
    [
        ("*", ["1.2.3.4", "::1"], []),
        ("", [], ["1.2.3.4"]),
        ("192.168.0.1", ["192.168.0.1"], ["192.168.0.2"]),
        ("192.168.0.{1,2}", ["192.168.0.1", "192.168.0.2"], ["192.168.0.3"]),
        ("192.168.1.1-5", ["192.168.1.1", "192.168.1.5"], ["192.168.1.6", "192.168.2.1"]),
        ("192.168.*.*", ["192.168.200.1"], ["192.169.0.1"]),
        ("10.0.0.0/8", ["10.255.0.1"], ["11.0.0.1", "not-an-ip"]),
    ],
)
def test_white_address_patterns(pattern: str, inside: list[str], outside: list[str]) -> None:
    match = address_matcher(pattern)
    assert all(match(a) for a in inside)
    assert not any(match(a) for a in outside)


@pytest.mark.parametrize(
    "pattern", ["192.168.1.300", "192.168.1.5-1", "192.168.0.{1,x}", "1.2.3", "10.0.0.0/99"]
)
def test_bad_white_address_patterns(pattern: str) -> None:
    with pytest.raises(ValueError, match="bad white remote address"):
        address_matcher(pattern)


def test_reload_keeps_the_old_rules_when_the_new_file_is_bad(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL)
    service = AclService(AclWatcher(path))
    assert not service.watcher.reload_if_changed()
    path.write_text(ACL.replace("topicC=SUB", "topicC=PUB"))
    os.utime(path, ns=(1, 1))
    assert service.watcher.reload_if_changed()
    validate(service.rules, signed(RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": "topicC"}), CLIENT)
    path.write_text(ACL + "  - accessKey: [\n")
    os.utime(path, ns=(2, 2))
    assert not service.watcher.reload_if_changed()
    assert "line 18: unterminated flow list" in caplog.text
    validate(service.rules, signed(RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": "topicC"}), CLIENT)
