"""tidemq's clients against real Apache RocketMQ brokers, feature by feature: transactions (with the
broker's transaction check), SQL92 selectors, request-reply, timer messages and plain ACL.

The 4.x broker is 4.9.7: 4.9.8 was released as a client only. Each configuration is one cluster (a name
server and two masters) per module:

* ``features`` (both versions): ``enablePropertyFilter=true`` and a transaction check every second for
  half messages older than a second, checked at most 3 times (``transactionTimeOut``,
  ``transactionCheckInterval``, ``transactionCheckMax``, the same names in 4.9.7's and 5.3.3's
  BrokerConfig), and on 5.3.3 an op log written every 100 ms (``transactionOpBatchInterval``, 3 s by
  default: a check a second could otherwise ask again, and a COMMIT answered twice is delivered twice, as
  transactions are at least once). 5.3.3's timer wheel is on by default (``timerWheelEnable``,
  ``timerMaxDelaySec`` 3 days, ``timerPrecisionMs`` 1 s); 4.9.7 has no timer messages.
* ``acl`` (4.9.7 only): ``aclEnable=true`` with its own ROCKETMQ_HOME whose ``conf/plain_acl.yml`` (the
  file 4.9.7's PlainPermissionManager reads: ``rocketmq.home.dir`` + the ``rocketmq.acl.plain.file``
  property, default ``conf/plain_acl.yml``) has an admin, a writer and a read-only account, and no white
  list. The SQL92 filter is off there (the default), which is where "the broker refuses SQL92" is seen.
  5.3.3 is not tested with ``aclEnable=true``: plain ACL 1.0 is gone from it (no rocketmq-acl module; the
  BrokerController never reads ``aclEnable``, only rocketmq-auth's ACL 2.0 migration does), so the flag
  alone leaves a 5.3.3 broker open.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from tests.consumer_support import Collector
from tests.rocketmq_cluster import VERSIONS, JavaCluster, create_topic, java_cluster
from tests.support import eventually, unique
from tidemq.client import (
    ConsumeStatus,
    LocalTransactionState,
    Message,
    MessageSelector,
    MQClientError,
    Producer,
    PushConsumer,
    TransactionProducer,
)
from tidemq.client.api import BrokerError
from tidemq.client.config import ClientConfig
from tidemq.client.consumer import ConsumeFromWhere
from tidemq.client.consumer.lite_pull import LitePullConsumer
from tidemq.filter.sql92 import SqlParseError
from tidemq.record import MessageExt, Prop

pytestmark = [pytest.mark.e2e, pytest.mark.java_broker]
FIRST = ConsumeFromWhere.FIRST_OFFSET

FEATURE_SETTINGS = {
    "enablePropertyFilter": "true",
    "transactionTimeOut": "1000",
    "transactionCheckInterval": "1000",
    "transactionCheckMax": "3",
    # 5.x writes the op log (what ended) in batches every 3 s: sooner, or a check repeats before it.
    "transactionOpBatchInterval": "100",
}
ADMIN = ("tidemqAdmin", "adminSecret123")
WRITER = ("tidemqWriter", "writerSecret123")
READER = ("tidemqReader", "readerSecret123")
PLAIN_ACL = f"""globalWhiteRemoteAddresses: []
accounts:
- accessKey: {ADMIN[0]}
  secretKey: {ADMIN[1]}
  admin: true
- accessKey: {WRITER[0]}
  secretKey: {WRITER[1]}
  admin: false
  defaultTopicPerm: PUB|SUB
  defaultGroupPerm: SUB
- accessKey: {READER[0]}
  secretKey: {READER[1]}
  admin: false
  defaultTopicPerm: SUB
  defaultGroupPerm: SUB
"""


@pytest.fixture(scope="module", params=VERSIONS)
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JavaCluster]:
    work = tmp_path_factory.mktemp(f"rocketmq-features-{request.param}")
    yield from java_cluster(request.param, work, broker_settings=FEATURE_SETTINGS)


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JavaCluster]:
    work = tmp_path_factory.mktemp("rocketmq-acl-4.9.7")
    yield from java_cluster(
        "4.9.7", work, broker_settings={"aclEnable": "true"}, home_files={"conf/plain_acl.yml": PLAIN_ACL}
    )


async def _consume(
    namesrv: str,
    topic: str,
    expect: int,
    selector: str | MessageSelector = "*",
    credentials: tuple[str, str] | None = None,
    settle: float = 2.0,
) -> list[MessageExt]:
    """What a push consumer of a new group gets from the first offset: ``expect`` messages, and whatever
    else arrives within ``settle`` seconds more."""
    got = Collector()
    config = ClientConfig(namesrv_addr=namesrv, credentials=credentials)
    c = PushConsumer(unique("G"), namesrv, config=config, consume_from_where=FIRST)
    c.subscribe(topic, selector)
    c.register_listener(got)
    await c.start()
    try:
        await eventually(lambda: len(got.deliveries) >= expect, timeout=40, what=f"{expect} messages")
        await asyncio.sleep(settle)
    finally:
        await c.shutdown()
    return got.deliveries


# --- transactions -------------------------------------------------------------------------------------


async def test_transactions_commit_rollback_and_the_broker_check(cluster: JavaCluster) -> None:
    topic = unique("Tx")
    await create_topic(cluster, topic)
    checked: list[str] = []

    def execute(msg: Message, arg: object) -> LocalTransactionState:
        return {
            b"commit": LocalTransactionState.COMMIT_MESSAGE,
            b"rollback": LocalTransactionState.ROLLBACK_MESSAGE,
        }.get(msg.body, LocalTransactionState.UNKNOW)

    def check(msg: MessageExt) -> LocalTransactionState:
        checked.append(msg.body.decode())
        if msg.body == b"check-commit":
            return LocalTransactionState.COMMIT_MESSAGE
        return LocalTransactionState.ROLLBACK_MESSAGE

    async with TransactionProducer(unique("TxPG"), cluster.namesrv, execute, check) as producer:
        results = {
            body: await producer.send_in_transaction(Message(topic, body.encode()))
            for body in ("commit", "rollback", "check-commit", "check-rollback")
        }
        assert results["commit"].local_transaction_state is LocalTransactionState.COMMIT_MESSAGE
        assert results["check-commit"].local_transaction_state is LocalTransactionState.UNKNOW
        await eventually(
            lambda: {"check-commit", "check-rollback"} <= set(checked),
            timeout=30,
            what="the broker's CHECK_TRANSACTION_STATE for both UNKNOW transactions",
        )
        got = await _consume(cluster.namesrv, topic, 2, settle=4.0)
    assert sorted({m.body for m in got}) == [b"check-commit", b"commit"]  # ROLLBACKs never appear
    assert len(got) == 2, f"a transaction was delivered twice: {sorted(m.body for m in got)}"
    assert not {"commit", "rollback"} & set(checked)  # their outcome was told, not asked for
    commit = next(m for m in got if m.body == b"commit")
    assert commit.properties.get(Prop.TRAN_MSG) == "true"
    assert commit.msg_id == results["commit"].msg_id


# --- SQL92 selectors ----------------------------------------------------------------------------------

SQL = "a > 5 AND region IN ('eu','us')"
ROWS = [(7, "eu"), (3, "eu"), (9, "us"), (8, "asia"), (6, None), (10, "us"), (5, "us")]


async def _send_rows(namesrv: str, topic: str, credentials: tuple[str, str] | None = None) -> None:
    config = ClientConfig(namesrv_addr=namesrv, credentials=credentials)
    async with Producer(unique("PG"), namesrv, config=config) as producer:
        for i, (a, region) in enumerate(ROWS):
            props = {"a": str(a)} | ({"region": region} if region else {})
            await producer.send(Message(topic, f"row{i}".encode(), properties=props))


async def test_sql92_selector_push_and_lite_pull(cluster: JavaCluster) -> None:
    topic = unique("Sql")
    await create_topic(cluster, topic)
    await _send_rows(cluster.namesrv, topic)
    want = sorted(f"row{i}".encode() for i, (a, r) in enumerate(ROWS) if a > 5 and r in ("eu", "us"))

    pushed = await _consume(cluster.namesrv, topic, len(want), MessageSelector.sql(SQL))
    assert sorted(m.body for m in pushed) == want

    puller = LitePullConsumer(unique("SqlPull"), cluster.namesrv, consume_from_where=FIRST)
    puller.subscribe(topic, MessageSelector.sql(SQL))
    await puller.start()
    pulled: list[MessageExt] = []
    try:
        deadline = time.monotonic() + 30
        while len(pulled) < len(want) and time.monotonic() < deadline:
            pulled += await puller.poll(1.0)
        pulled += await puller.poll(1.0)
    finally:
        await puller.shutdown()
    assert sorted(m.body for m in pulled) == want


def test_malformed_sql92_is_refused_before_it_reaches_the_broker() -> None:
    with pytest.raises(SqlParseError, match="column"):
        MessageSelector.sql("a > AND region IN ('eu'")


# --- request-reply ------------------------------------------------------------------------------------


async def test_request_reply_through_the_real_broker(cluster: JavaCluster) -> None:
    topic = unique("Req")
    await create_topic(cluster, topic)
    async with Producer(unique("Responder"), cluster.namesrv) as responder:

        async def answer(msgs: list[MessageExt], ctx: object) -> ConsumeStatus:
            for m in msgs:
                await responder.reply(m, b"re:" + m.body)
            return ConsumeStatus.CONSUME_SUCCESS

        c = PushConsumer(unique("ReqG"), cluster.namesrv, consume_from_where=FIRST)
        c.subscribe(topic)
        c.register_listener(answer)
        await c.start()
        try:
            async with Producer(unique("Requester"), cluster.namesrv) as requester:
                reply = await requester.request(Message(topic, b"ping"), timeout=15)
                assert reply.body == b"re:ping"
                assert reply.topic.endswith("REPLY_TOPIC")
        finally:
            await c.shutdown()


# --- timer messages (5.x) -----------------------------------------------------------------------------


async def test_timer_messages_on_5x(cluster: JavaCluster) -> None:
    if cluster.major < 5:
        pytest.skip("RocketMQ 4.9.7 has no timer messages (PROPERTY_TIMER_DELIVER_MS is 5.x)")
    topic = unique("Timer")
    await create_topic(cluster, topic)
    arrived: dict[bytes, tuple[float, MessageExt]] = {}

    async def listen(msgs: list[MessageExt], ctx: object) -> ConsumeStatus:
        for m in msgs:
            arrived.setdefault(m.body, (time.time(), m))
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(unique("TimerG"), cluster.namesrv, consume_from_where=FIRST)
    c.subscribe(topic)
    c.register_listener(listen)
    await c.start()
    try:
        async with Producer(unique("PG"), cluster.namesrv) as producer:
            await producer.send(Message(topic, b"warm-up"))  # the consumer pulls before timing starts
            await eventually(lambda: b"warm-up" in arrived, timeout=30, what="the warm-up message")
            sent = time.time()
            await producer.send(Message(topic, b"delay"), delay=timedelta(seconds=4))
            at_ms = int((time.time() + 6) * 1000)
            await producer.send(Message(topic, b"deliver_at"), deliver_at=at_ms)
            with pytest.raises(
                BrokerError, match=r"MESSAGE_ILLEGAL.*timer message illegal.*max delay 259200000ms"
            ):
                await producer.send(Message(topic, b"too-far"), delay=timedelta(days=4))
        await eventually(lambda: len(arrived) >= 3, timeout=30, what="the two timer messages")
        await asyncio.sleep(1)
    finally:
        await c.shutdown()
    assert set(arrived) == {b"warm-up", b"delay", b"deliver_at"}
    # The wheel ticks every timerPrecisionMs (1 s) and may fire up to one tick before the due time.
    assert sent + 4 - 1.0 <= arrived[b"delay"][0] <= sent + 4 + 3
    assert at_ms / 1000 - 1.0 <= arrived[b"deliver_at"][0] <= at_ms / 1000 + 3
    assert arrived[b"delay"][1].topic == topic


# --- plain ACL (4.9.7) --------------------------------------------------------------------------------


async def test_acl_signed_clients_send_and_consume(acl_cluster: JavaCluster) -> None:
    topic = unique("Acl")
    await create_topic(acl_cluster, topic, credentials=ADMIN)
    config = ClientConfig(namesrv_addr=acl_cluster.namesrv, credentials=WRITER)
    async with Producer(unique("PG"), acl_cluster.namesrv, config=config) as producer:
        for i in range(4):
            await producer.send(Message(topic, b"acl%d" % i))
    got = await _consume(acl_cluster.namesrv, topic, 4, credentials=READER, settle=0.5)
    assert sorted(m.body for m in got) == [b"acl%d" % i for i in range(4)]


@pytest.mark.parametrize(
    ("credentials", "problem"),
    [
        ((WRITER[0], "not-the-secret"), f"Check signature failed for accessKey={WRITER[0]}"),
        (None, "No accessKey is configured"),
        (READER, "No default permission for topic:AclNo_"),
    ],
    ids=["wrong-secret", "no-credentials", "no-pub-permission"],
)
async def test_acl_refuses_and_the_client_names_the_problem(
    acl_cluster: JavaCluster, credentials: tuple[str, str] | None, problem: str
) -> None:
    topic = unique("AclNo")
    await create_topic(acl_cluster, topic, credentials=ADMIN)
    config = ClientConfig(namesrv_addr=acl_cluster.namesrv, credentials=credentials)
    async with Producer(unique("PG"), acl_cluster.namesrv, config=config) as producer:
        with pytest.raises(MQClientError, match=problem):
            await producer.send(Message(topic, b"refused"))


async def test_sql92_on_a_broker_without_the_property_filter_fails_at_start(acl_cluster: JavaCluster) -> None:
    topic = unique("SqlOff")
    await create_topic(acl_cluster, topic, credentials=ADMIN)
    config = ClientConfig(namesrv_addr=acl_cluster.namesrv, credentials=READER)
    c = PushConsumer(unique("SqlOffG"), acl_cluster.namesrv, config=config)
    c.subscribe(topic, MessageSelector.sql(SQL))
    c.register_listener(Collector())
    with pytest.raises(MQClientError, match=r"does not support consumer to filter message by SQL92"):
        await c.start()
    await c.shutdown()
