"""The one topic and group name check the broker, the clients, the console and the Spark options share."""

from __future__ import annotations

import pytest

from tidemq.remoting.names import MAX_GROUP_LENGTH, MAX_TOPIC_LENGTH, well_formed_name


@pytest.mark.parametrize(
    "name",
    ["a", "TopicTest", "%RETRY%group", "a|b", "under_score-dash", "0", "x" * MAX_TOPIC_LENGTH],
)
def test_names_java_allows_are_well_formed(name: str) -> None:
    assert well_formed_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "x" * (MAX_TOPIC_LENGTH + 1),
        "topic\n",  # a ^...$ search would let the trailing newline through; Java's Pattern.matches does not
        "\ntopic",
        "has space",
        "dot.ted",
        "slash/ed",
        "ünïcode",
        "tab\t",
    ],
)
def test_names_java_refuses_are_not(name: str) -> None:
    assert not well_formed_name(name)
    assert not well_formed_name(name)  # the second answer comes from the cache and says the same


def test_group_names_may_be_longer_than_topic_names() -> None:
    assert well_formed_name("g" * MAX_GROUP_LENGTH, MAX_GROUP_LENGTH)
    assert not well_formed_name("g" * (MAX_GROUP_LENGTH + 1), MAX_GROUP_LENGTH)
    assert not well_formed_name("g" * MAX_GROUP_LENGTH)
