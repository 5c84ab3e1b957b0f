"""SQL92 filtering across Apache RocketMQ's own Java client (4.9.8) and ``tidemq server``: a push and a
lite pull consumer subscribed with MessageSelector.bySql get exactly the matching messages (sent by the
Java producer with user properties and by tidemq's producer), a malformed expression fails the Java
consumer's start through CHECK_CLIENT_CONFIG, and MessageSelector.byTag still works."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.java_client_support import JavaPeer, events
from tests.support import ServerProcess, create_topic, unique
from tidemq.client import Message, Producer
from tidemq.remoting.codes import ResponseCode

pytestmark = [pytest.mark.e2e, pytest.mark.java_client]

SQL = "a > 5 AND region IN ('eu','us')"
#: The Java producer's messages java-0..java-4 carry these user properties in turn.
JAVA_PROPS = ["a=3,region=eu", "a=7,region=eu", "a=9,region=asia", "a=6,region=us", "a=10"]
#: tidemq's producer's messages: body -> user properties.
TIDEMQ_PROPS = {
    "py-0": {"a": "8", "region": "us"},
    "py-1": {"a": "5", "region": "eu"},
    "py-2": {"region": "eu"},
    "py-3": {"a": "100", "region": "eu"},
}
MATCHING = {"java-1", "java-3", "py-0", "py-3"}


@pytest.fixture
def java(server: ServerProcess, tmp_path: Path) -> JavaPeer:
    return JavaPeer(server.namesrv, tmp_path / "java-home")


async def filled_topic(server: ServerProcess, java: JavaPeer) -> str:
    topic = unique("JavaSql")
    await create_topic(server.broker, topic, routed_by=server.namesrv)
    props: list[str] = []
    for p in JAVA_PROPS:
        props += ["--props", p]
    sent = events(
        await asyncio.to_thread(java.run, "produce", "--topic", topic, "--count", "5", *props), "sent"
    )
    assert len(sent) == 5
    async with Producer(unique("SqlPG"), server.namesrv) as producer:
        for body, properties in TIDEMQ_PROPS.items():
            await producer.send(Message(topic, body.encode(), properties=properties))
    return topic


async def test_java_push_and_lite_pull_consumers_get_exactly_the_matching_messages(
    server: ServerProcess, java: JavaPeer
) -> None:
    topic = await filled_topic(server, java)
    pushed = await asyncio.to_thread(
        java.run,
        "consume",
        "--topic",
        topic,
        "--group",
        unique("JavaSqlCG"),
        "--selector",
        "sql",
        "--expression",
        SQL,
        "--expect",
        str(len(MATCHING)),
        "--linger-ms",
        "2000",
    )
    received = events(pushed, "received")
    assert sorted(r["body"] for r in received) == sorted(MATCHING), pushed.describe()
    by_body = {r["body"]: r["properties"] for r in received}
    assert (by_body["java-1"]["a"], by_body["java-1"]["region"]) == ("7", "eu")
    assert (by_body["py-0"]["a"], by_body["py-0"]["region"]) == ("8", "us")
    pulled = await asyncio.to_thread(
        java.run,
        "litepull",
        "--topic",
        topic,
        "--group",
        unique("JavaSqlLiteCG"),
        "--selector",
        "sql",
        "--expression",
        SQL,
        "--expect",
        str(len(MATCHING)),
        "--linger-ms",
        "1500",
    )
    assert sorted(r["body"] for r in events(pulled, "received")) == sorted(MATCHING), pulled.describe()


async def test_malformed_expression_fails_the_java_consumer_start(
    server: ServerProcess, java: JavaPeer
) -> None:
    topic = unique("JavaSqlBad")
    await create_topic(server.broker, topic, routed_by=server.namesrv)
    result = await asyncio.to_thread(
        java.run,
        "consume",
        "--topic",
        topic,
        "--group",
        unique("JavaSqlBadCG"),
        "--selector",
        "sql",
        "--expression",
        "a > AND region",
        check=False,
    )
    assert result.rc == 1, result.describe()
    [failure] = events(result, "start-failed")
    assert failure["code"] == ResponseCode.SUBSCRIPTION_PARSE_FAILED, failure
    assert failure["remark"].startswith("parse the subscription failed: "), failure


async def test_java_tag_selector_still_filters(server: ServerProcess, java: JavaPeer) -> None:
    topic = unique("JavaTagSel")
    await create_topic(server.broker, topic, routed_by=server.namesrv)
    async with Producer(unique("TagPG"), server.namesrv) as producer:
        for i, tag in enumerate(["TagA", "TagB", "TagC", "TagB", "TagA"]):
            await producer.send(Message(topic, f"t{i}".encode(), tags=tag))
    result = await asyncio.to_thread(
        java.run,
        "consume",
        "--topic",
        topic,
        "--group",
        unique("JavaTagCG"),
        "--selector",
        "tag",
        "--expression",
        "TagA || TagC",
        "--expect",
        "3",
        "--linger-ms",
        "2000",
    )
    received = events(result, "received")
    assert sorted((r["body"], r["tags"]) for r in received) == [
        ("t0", "TagA"),
        ("t2", "TagC"),
        ("t4", "TagA"),
    ], result.describe()
