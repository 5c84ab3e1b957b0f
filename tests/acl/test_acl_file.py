"""Reading plain_acl.yml: the YAML subset and the schema, errors with line numbers."""

from __future__ import annotations

import pytest

from tidemq.acl.file import AclFileError, load_acl_config, parse_yaml_subset

JAVA_SAMPLE = """\
# plain_acl.yml as Apache RocketMQ ships it (4.x)
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
"""


def test_java_sample() -> None:
    config = load_acl_config(JAVA_SAMPLE)
    assert config.global_white_remote_addresses == ["10.10.103.*", "192.168.0.*"]
    first, second = config.accounts
    assert (first.access_key, first.secret_key, first.admin) == ("RocketMQ", "12345678", False)
    assert first.white_remote_address == ""
    assert (first.default_topic_perm, first.default_group_perm) == ("DENY", "SUB")
    assert first.topic_perms == ["topicA=DENY", "topicB=PUB|SUB", "topicC=SUB"]
    assert first.group_perms == ["groupA=DENY", "groupB=PUB|SUB", "groupC=SUB"]
    assert (second.access_key, second.white_remote_address, second.admin) == (
        "rocketmq2",
        "192.168.1.*",
        True,
    )
    assert second.line == 23


def test_subset_forms() -> None:
    doc = parse_yaml_subset("a: 'x # y'\nb: [p, \"q\"]\nc:\n- 1\n- 2\nd: ~  # none\ne:\n  - k: v\n    l: w\n")
    assert doc == {"a": "x # y", "b": ["p", "q"], "c": ["1", "2"], "d": None, "e": [{"k": "v", "l": "w"}]}


def test_empty_file_has_no_accounts() -> None:
    assert load_acl_config("# nothing\n").accounts == []


@pytest.mark.parametrize(
    ("source", "line", "words"),
    [
        ("accounts:\n  - accessKey: abcdef\n     secretKey: x\n", 3, "indentation"),
        ("accounts:\n  - accessKey: &a abcdef\n", 2, "anchors"),
        ("globalWhiteRemoteAddresses:\n  - *\n", 2, "aliases"),
        ("a: 'open\n", 1, "unterminated"),
        ("a: 1\na: 2\n", 2, "duplicate key"),
        ("a: |\n  text\n", 1, "block scalars"),
        ("just text\n", 1, "expected 'key: value'"),
        ("---\na: 1\n", 1, "document markers"),
        ("a:\n\t- x\n", 2, "tabs"),
    ],
)
def test_yaml_errors_name_the_line(source: str, line: int, words: str) -> None:
    with pytest.raises(AclFileError) as info:
        load_acl_config(source)
    assert info.value.line == line
    assert words in str(info.value)
    assert str(info.value).startswith(f"line {line}: ")


@pytest.mark.parametrize(
    ("source", "line", "words"),
    [
        ("accountz: []\n", 1, "unknown key 'accountz'"),
        (
            "accounts:\n  - accessKey: abcdefg\n    secretKey: abcdefg\n    colour: red\n",
            4,
            "unknown account",
        ),
        (
            "accounts:\n  - accessKey: abcdefg\n    secretKey: abcdefg\n    topicPerms:\n      - t=ALL\n",
            4,
            "unknown permission 'ALL'",
        ),
        (
            "accounts:\n  - accessKey: abcdefg\n    secretKey: abcdefg\n    groupPerms:\n      - g\n",
            4,
            "not 'name=PERM'",
        ),
        ("accounts:\n  - accessKey: abcdefg\n    admin: yes\n    secretKey: abcdefg\n", 3, "true or false"),
        ("accounts:\n  - accessKey: abcdefg\n", 2, "no secretKey"),
        (
            "accounts:\n  - accessKey: abcdefg\n    secretKey: abcdefg\n    whiteRemoteAddress: 1.2.3.999\n",
            4,
            "bad white remote address",
        ),
        ("globalWhiteRemoteAddresses:\n  - 1.2.3.4-1\n", 1, "bad white remote address"),
        ("accounts:\n  - accessKey: abc\n    secretKey: abcdefg\n", 2, "at least 6"),
        (
            "accounts:\n  - accessKey: abcdefg\n    secretKey: abcdefg\n"
            "  - accessKey: abcdefg\n    secretKey: abcdefg\n",
            4,
            "duplicate accessKey",
        ),
    ],
)
def test_schema_errors_name_the_line(source: str, line: int, words: str) -> None:
    with pytest.raises(AclFileError) as info:
        load_acl_config(source)
    assert info.value.line == line
    assert words in str(info.value)
