"""Interop: tidemq's own Python clients against the real ali-ons (Node.js) client, through ``tidemq server``.

* tidemq ``Producer`` (single sends with tags/keys, one compressed body > 4 KiB, one batch)
  -> ali-ons ``consume.js``;
* ali-ons ``produce.js`` -> tidemq ``PushConsumer`` (CLUSTERING, FIRST_OFFSET);
* ali-ons' retry path (``consume.js --fail-first``) for messages tidemq produced, compressed included.

The harness contract (JSON lines on stdout, logs on stderr, exit 0 ok / 1 error / 2 timeout) is in
interop/ali-ons/NOTES.md. ali-ons cannot auto-create topics, so every topic is created (and its
route awaited) first. The module-scoped ``server`` fixture (conftest.py) uses 1 s delay levels.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

from tests.alions_support import node, require_harness
from tests.support import RawClient, ServerProcess, create_topic, run, server_log, unique
from tidemq.client.consumer import ConsumeContext, ConsumeFromWhere, ConsumeStatus, MessageModel, PushConsumer
from tidemq.client.message import Message, SendResult, SendStatus
from tidemq.client.producer import Producer
from tidemq.record import MessageExt, SysFlag, iter_records
from tidemq.remoting.codes import ResponseCode

pytestmark = pytest.mark.e2e

require_harness()

# A text body well over ali-ons'/tidemq's 4096-byte compression threshold (consume.js decodes utf-8).
BIG_BODY = "".join(f"big-{i:05d}|" for i in range(1200))  # 12 000 bytes
assert len(BIG_BODY.encode()) > 4096


def tidemq_produce(
    server: ServerProcess, messages: list[Message], batch: list[Message] | None = None
) -> tuple[list[SendResult], SendResult | None]:
    """Send ``messages`` one by one, then ``batch`` with send_batch, with tidemq's Producer."""

    async def go() -> tuple[list[SendResult], SendResult | None]:
        async with Producer(unique("PG_tidemq"), server.namesrv) as producer:
            results = [await producer.send(m) for m in messages]
            batch_result = await producer.send_batch(batch) if batch else None
        return results, batch_result

    results, batch_result = run(go())
    for r in [*results, *([batch_result] if batch_result else [])]:
        assert r.status is SendStatus.SEND_OK, r
    return results, batch_result


def stored_record(server: ServerProcess, topic: str, queue_id: int, offset: int) -> MessageExt:
    """The record at (queue_id, offset) as the broker serves it, body left as stored."""

    async def go() -> MessageExt:
        c = await RawClient.open(server.broker)
        try:
            resp, _ = await c.pull(topic, queue_id, offset, max_nums=1, group=unique("raw_reader"))
        finally:
            c.close()
        assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
        return next(iter_records(resp.body, decompress=False))

    record: MessageExt = run(go())
    return record


# --------------------------------------------------------------------------------------------------


def test_tidemq_producer_then_alions_consume(server: ServerProcess) -> None:
    n, n_batch = 40, 8
    topic = unique("tq_to_ali")
    group = unique("CG_tq_to_ali")
    run(create_topic(server.broker, topic, routed_by=server.namesrv))

    singles = [Message(topic, f"tbody-{i}".encode(), tags="TagT", keys=f"tk-{i}") for i in range(n)]
    # Several keys: both sides join them with a space in the KEYS property.
    singles.append(Message(topic, BIG_BODY.encode(), tags="TagBig", keys=["big-a", "big-b"]))
    batch = [Message(topic, f"bbody-{i}".encode(), tags="TagB", keys=f"bk-{i}") for i in range(n_batch)]
    results, batch_result = tidemq_produce(server, singles, batch)
    assert batch_result is not None
    want = {f"tbody-{i}": ("TagT", f"tk-{i}") for i in range(n)}
    want[BIG_BODY] = ("TagBig", "big-a big-b")
    want.update({f"bbody-{i}": ("TagB", f"bk-{i}") for i in range(n_batch)})

    res = node("consume.js", namesrv=server.namesrv, topic=topic, group=group, count=len(want))
    assert res.rc == 0, res.describe() + "\nserver log:\n" + server_log(server)
    bodies = Counter(r["body"] for r in res.records)
    assert set(bodies) == set(want), (set(want) ^ set(bodies), res.describe())
    assert {b: c for b, c in bodies.items() if c > 1} == {}, "a message was delivered twice"
    for r in res.records:
        assert r["topic"] == topic, r
        assert (r["tags"], r["keys"]) == want[r["body"]], r
        assert r["reconsumeTimes"] == 0 and r["failed"] is False, r
    big = next(r for r in res.records if r["tags"] == "TagBig")
    assert big["body"] == BIG_BODY, "the compressed body did not arrive intact"
    # ... and it really travelled compressed, so ali-ons inflated it itself.
    stored = stored_record(server, topic, big["queueId"], big["queueOffset"])
    assert stored.sys_flag & SysFlag.COMPRESSED and len(stored.body) < len(BIG_BODY) // 2, stored.sys_flag

    # ali-ons' msgId is the offset id (it ignores UNIQ_KEY); tidemq reports the same as offset_msg_id.
    ali_ids = {r["body"]: r["msgId"] for r in res.records}
    for msg, sent in zip(singles, results, strict=True):
        body = msg.body.decode()
        assert ali_ids[body] == sent.offset_msg_id, (body[:20], sent)
        rec = next(r for r in res.records if r["body"] == body)
        # tidemq's UNIQ_KEY travels as an ordinary property that ali-ons hands through untouched.
        assert rec["properties"].get("UNIQ_KEY") == sent.msg_id, (rec["properties"], sent)
        assert (rec["queueId"], rec["queueOffset"]) == (sent.message_queue.queue_id, sent.queue_offset)
    # A batch is stored as consecutive records of one queue; its offset ids come back comma-joined.
    batch_recs = sorted((r for r in res.records if r["tags"] == "TagB"), key=lambda r: r["queueOffset"])
    assert [r["body"] for r in batch_recs] == [f"bbody-{i}" for i in range(n_batch)]
    assert {r["queueId"] for r in batch_recs} == {batch_result.message_queue.queue_id}
    first = batch_result.queue_offset
    assert [r["queueOffset"] for r in batch_recs] == list(range(first, first + n_batch))
    assert [r["msgId"] for r in batch_recs] == batch_result.offset_msg_id.split(","), batch_result
    assert [r["properties"].get("UNIQ_KEY") for r in batch_recs] == batch_result.msg_id.split(",")


def test_alions_produce_then_tidemq_push_consumer(server: ServerProcess) -> None:
    n = 60
    topic = unique("ali_to_tq")
    group = unique("CG_ali_to_tq")
    run(create_topic(server.broker, topic, routed_by=server.namesrv))

    res = node(
        "produce.js",
        namesrv=server.namesrv,
        topic=topic,
        count=n,
        tags="TagA",
        keys_prefix="ak-",
        body_prefix="abody-",
    )
    assert res.rc == 0, res.describe() + "\nserver log:\n" + server_log(server)
    assert [r["i"] for r in res.records] == list(range(n)), res.describe()
    acked = {f"abody-{r['i']}": r for r in res.records}

    deliveries: list[MessageExt] = []

    async def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        deliveries.extend(msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    async def go() -> None:
        c = PushConsumer(
            group,
            server.namesrv,
            message_model=MessageModel.CLUSTERING,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        )
        c.subscribe(topic, "*")
        c.register_listener(listener)
        await c.start()
        try:
            deadline = time.monotonic() + 20
            while len({m.body for m in deliveries}) < n and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)  # room for a duplicate to show up
        finally:
            await c.shutdown()

    run(go())

    bodies = Counter(m.body.decode() for m in deliveries)
    assert set(bodies) == set(acked), (set(acked) ^ set(bodies), server_log(server))
    assert {b: c for b, c in bodies.items() if c > 1} == {}, "a message was delivered twice"
    for m in deliveries:
        body = m.body.decode()
        i = body.split("-", 1)[1]
        assert m.topic == topic, m
        assert m.tags == "TagA", m
        assert m.keys == f"ak-{i}", m
        assert m.reconsume_times == 0, m
        ack = acked[body]
        assert m.msg_id == ack["msgId"], (body, m.msg_id, ack)
        assert (m.queue_id, m.queue_offset) == (ack["queueId"], ack["queueOffset"]), (body, ack)


def test_alions_retry_of_tidemq_produced_messages(server: ServerProcess) -> None:
    """ali-ons rejects the first delivery (CONSUMER_SEND_MSG_BACK); the retry keeps body, tags, keys."""
    topic = unique("tq_ali_retry")
    group = unique("CG_tq_ali_retry")
    run(
        create_topic(server.broker, topic, queues=1, routed_by=server.namesrv)
    )  # one queue: delivery order is send order
    # The first message (the one that fails) is the compressed one, so the retry copy must keep the
    # compressed flag (or be stored inflated) for ali-ons to read it back.
    msgs = [
        Message(topic, BIG_BODY.encode(), tags="TagR", keys="rk-big"),
        Message(topic, b"rbody-1", tags="TagR", keys="rk-1"),
        Message(topic, b"rbody-2", tags="TagR", keys="rk-2"),
    ]
    tidemq_produce(server, msgs)

    t0 = time.monotonic()
    res = node("consume.js", namesrv=server.namesrv, topic=topic, group=group, count=len(msgs), fail_first=1)
    elapsed = time.monotonic() - t0
    assert res.rc == 0, res.describe() + "\nserver log:\n" + server_log(server)

    failed = [r for r in res.records if r["failed"]]
    ok = [r for r in res.records if not r["failed"]]
    assert len(failed) == 1 and failed[0]["body"] == BIG_BODY, failed
    assert failed[0]["reconsumeTimes"] == 0
    assert Counter(r["body"] for r in ok) == Counter(m.body.decode() for m in msgs), res.describe()
    keys = {m.body.decode(): m.keys for m in msgs}
    for r in ok:
        assert r["topic"] == topic, r  # restored from RETRY_TOPIC
        assert r["tags"] == "TagR" and r["keys"] == keys[r["body"]], r
        assert r["reconsumeTimes"] == (1 if r["body"] == BIG_BODY else 0), r
    order = [(r["body"], r["failed"]) for r in res.records]
    assert order.index((BIG_BODY, True)) < order.index((BIG_BODY, False))
    assert elapsed < 25, f"retry took {elapsed:.1f} s"
