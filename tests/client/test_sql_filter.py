"""SQL92 selectors against a real server: the push and lite pull consumers receive exactly the messages
whose properties match, and the broker refuses malformed expressions with SUBSCRIPTION_PARSE_FAILED
(docs/protocols/rocketmq-consumption.md#sql92-filters)."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from tests.consumer_support import Collector
from tests.support import RawClient, ServerProcess, create_topic, eventually, unique
from tidemq.client.consumer import ConsumeFromWhere, MessageSelector, PushConsumer
from tidemq.client.consumer.lite_pull import LitePullConsumer
from tidemq.client.message import Message
from tidemq.client.producer import Producer
from tidemq.filter import SqlParseError
from tidemq.record import MessageExt
from tidemq.remoting.codes import RequestCode, ResponseCode

pytestmark = pytest.mark.e2e

FIRST = ConsumeFromWhere.FIRST_OFFSET
SELECTOR = "a > 5 AND region IN ('eu','us')"
REGIONS = ["eu", "us", "ap", None]


def _properties(i: int) -> dict[str, str]:
    props = {"a": str(i % 10)}
    region = REGIONS[i % 4]
    if region is not None:
        props["region"] = region
    return props


def _expected(count: int) -> set[bytes]:
    return {f"m{i}".encode() for i in range(count) if i % 10 > 5 and REGIONS[i % 4] in ("eu", "us")}


async def _produce_mix(namesrv: str, topic: str, count: int) -> None:
    async with Producer(unique("PG"), namesrv) as producer:
        for i in range(count):
            await producer.send(Message(topic, f"m{i}".encode(), tags="T", properties=_properties(i)))


async def test_push_consumer_receives_exactly_the_matching_messages(server: ServerProcess) -> None:
    topic = unique("SqlPush")
    await create_topic(server.broker, topic)
    await _produce_mix(server.namesrv, topic, 80)
    expected = _expected(80)
    got = Collector()
    c = PushConsumer(unique("SqlPushGroup"), server.namesrv, consume_from_where=FIRST)
    c.subscribe(topic, MessageSelector.sql(SELECTOR))
    c.register_listener(got)
    await c.start()
    await eventually(lambda: got.distinct() >= expected, what="the matching messages", timeout=20.0)
    await asyncio.sleep(0.5)
    await c.shutdown()
    assert got.distinct() == expected and len(got.deliveries) == len(expected)


async def _poll_until(c: LitePullConsumer, count: int, timeout: float = 15.0) -> list[MessageExt]:
    out: list[MessageExt] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(out) < count and loop.time() < deadline:
        out += await c.poll(timeout=0.5)
    return out


@pytest.mark.parametrize("post_subscription_when_pull", [False, True])
async def test_lite_pull_consumer_receives_exactly_the_matching_messages(
    server: ServerProcess, post_subscription_when_pull: bool
) -> None:
    """From the heartbeat's subscription, and from the pull's own (expressionType in the header)."""
    topic = unique("SqlLite")
    await create_topic(server.broker, topic)
    await _produce_mix(server.namesrv, topic, 60)
    expected = _expected(60)
    c = LitePullConsumer(
        unique("SqlLiteGroup"),
        server.namesrv,
        consume_from_where=FIRST,
        post_subscription_when_pull=post_subscription_when_pull,
    )
    c.subscribe(topic, MessageSelector.sql("a BETWEEN 6 AND 9 AND (region = 'eu' OR region = 'us')"))
    await c.start()
    msgs = await _poll_until(c, len(expected))
    msgs += await c.poll(timeout=0.5)
    await c.shutdown()
    assert sorted(m.body for m in msgs) == sorted(expected)
    assert all(int(m.properties["a"]) > 5 for m in msgs)


async def test_a_tag_expression_still_filters_by_tag(server: ServerProcess) -> None:
    topic = unique("SqlTag")
    await create_topic(server.broker, topic)
    async with Producer(unique("PG"), server.namesrv) as producer:
        for i in range(20):
            await producer.send(Message(topic, f"m{i}".encode(), tags="A" if i % 2 else "B"))
    c = LitePullConsumer(unique("TagGroup"), server.namesrv, consume_from_where=FIRST)
    c.subscribe(topic, MessageSelector.tag("A"))
    await c.start()
    msgs = await _poll_until(c, 10)
    await c.shutdown()
    assert sorted(m.body for m in msgs) == sorted(f"m{i}".encode() for i in range(1, 20, 2))


def test_a_bad_expression_fails_subscribe() -> None:
    c = PushConsumer("BadSqlGroup", "127.0.0.1:1")
    with pytest.raises(SqlParseError, match="at column 3"):
        c.subscribe("T", MessageSelector.sql("a > 'x'"))
    with pytest.raises(ValueError, match="unexpected the end of the expression"):
        MessageSelector.sql("a >")


def _sql_subscription(topic: str, expression: str) -> dict[str, object]:
    return {
        "classFilterMode": False,
        "topic": topic,
        "subString": expression,
        "tagsSet": [],
        "codeSet": [],
        "subVersion": 1,
        "expressionType": "SQL92",
    }


async def test_the_broker_refuses_a_bad_expression(server: ServerProcess) -> None:
    """Heartbeat, pull and CHECK_CLIENT_CONFIG: SUBSCRIPTION_PARSE_FAILED with the problem named."""
    topic, group = unique("SqlBad"), unique("SqlBadGroup")
    await create_topic(server.broker, topic)
    raw = await RawClient.open(server.broker)
    try:
        heartbeat = {
            "clientID": "127.0.0.1@sql",
            "producerDataSet": [],
            "consumerDataSet": [
                {
                    "groupName": group,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                    "subscriptionDataSet": [_sql_subscription(topic, "a >> 1")],
                    "unitMode": False,
                }
            ],
        }
        resp = await raw.call(RequestCode.HEART_BEAT, body=orjson.dumps(heartbeat))
        assert resp.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert "unexpected '>' at column 4" in (resp.remark or "")

        pull = {
            "consumerGroup": group,
            "topic": topic,
            "queueId": "0",
            "queueOffset": "0",
            "maxMsgNums": "32",
            "sysFlag": "4",
            "commitOffset": "0",
            "suspendTimeoutMillis": "0",
            "subscription": "region IN (1)",
            "subVersion": "0",
            "expressionType": "SQL92",
        }
        resp = await raw.call(RequestCode.PULL_MESSAGE, pull)
        assert resp.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert "IN takes string literals" in (resp.remark or "")

        def check(expression: str) -> bytes:
            sub = _sql_subscription(topic, expression)
            return orjson.dumps({"group": group, "clientId": "127.0.0.1@sql", "subscriptionData": sub})

        resp = await raw.call(RequestCode.CHECK_CLIENT_CONFIG, body=check("a = NULL"))
        assert resp.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert "NULL cannot be compared" in (resp.remark or "")
        resp = await raw.call(RequestCode.CHECK_CLIENT_CONFIG, body=check(SELECTOR))
        assert resp.code == ResponseCode.SUCCESS
    finally:
        raw.close()
