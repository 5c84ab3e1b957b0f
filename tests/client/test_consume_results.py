"""What a push consumer does with its listener's answer, against a real ``tidemq server``: both spellings
of success and of try-later in both services, answers that are not a status, ``ack_index`` (concurrent)
and ``auto_commit`` with COMMIT / ROLLBACK (orderly)."""

from __future__ import annotations

import logging

import pytest

from tests.consumer_support import Collector, committed_offsets, consumer, max_offsets, produce
from tests.support import RawClient, ServerProcess, create_topic, eventually, unique
from tidemq.client.consumer import ConsumeContext, ConsumeFromWhere, ConsumeStatus
from tidemq.record import MessageExt

pytestmark = pytest.mark.e2e

FIRST = ConsumeFromWhere.FIRST_OFFSET


@pytest.mark.parametrize(
    ("orderly", "ok"),
    [(True, ConsumeStatus.CONSUME_SUCCESS), (False, ConsumeStatus.SUCCESS)],
    ids=["orderly-CONSUME_SUCCESS", "concurrent-SUCCESS"],
)
async def test_either_spelling_of_success_commits_in_either_service(
    server: ServerProcess, orderly: bool, ok: ConsumeStatus
) -> None:
    """The README's concurrent listener registered with orderly=True used to redeliver each queue's first
    message forever; a concurrent listener answering SUCCESS sent every message to the retry topic."""
    topic, group = unique("Spelling"), unique("SpellingGroup")

    await create_topic(server.broker, topic, 4)
    await produce(server.namesrv, topic, 20)
    got = Collector(ok=ok)
    # A message taken as failed goes straight to the dead-letter queue, where the test can see it.
    c = consumer(
        server.namesrv,
        group,
        topic,
        got,
        orderly=orderly,
        consume_from_where=FIRST,
        max_reconsume_times=0,
    )
    await c.start()
    try:
        await eventually(lambda: len(got.distinct()) == 20, what="20 messages consumed", timeout=20.0)
        await c.drain()
    finally:
        await c.shutdown()
    assert got.duplicates() == {}
    raw = await RawClient.open(server.broker)
    dead = await raw.call(30, {"topic": f"%DLQ%{group}", "queueId": "0"})
    raw.close()
    assert dead.code != 0 or dead.ext_fields["offset"] == "0", "messages went to the dead-letter queue"
    tops = await max_offsets(server.broker, topic, 4)
    assert await committed_offsets(server.broker, group, topic, 4) == tops


@pytest.mark.parametrize("orderly", [True, False], ids=["orderly", "concurrent"])
async def test_either_spelling_of_later_and_a_non_status_are_consumed_again(
    server: ServerProcess, orderly: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """RECONSUME_LATER and SUSPEND_CURRENT_QUEUE_A_MOMENT both mean "again" in both services; an answer
    that is not a status is logged, naming what came back, and the message is consumed again."""
    topic, group = unique("Later"), unique("LaterGroup")
    answers: dict[bytes, list[object]] = {
        b"m0": [ConsumeStatus.RECONSUME_LATER],
        b"m1": [ConsumeStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT],
        b"m2": [True],
    }
    deliveries: list[bytes] = []

    async def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> object:
        ctx.suspend_current_queue_time_ms = 10
        (msg,) = msgs
        deliveries.append(msg.body)
        pending = answers.get(msg.body)
        return pending.pop(0) if pending else ConsumeStatus.CONSUME_SUCCESS

    await create_topic(server.broker, topic, 1)
    await produce(server.namesrv, topic, 4)
    c = consumer(server.namesrv, group, topic, listener, orderly=orderly, consume_from_where=FIRST)
    with caplog.at_level(logging.WARNING, logger="tidemq.client.consumer"):
        await c.start()
        try:
            await eventually(
                lambda: all(deliveries.count(b) == 2 for b in (b"m0", b"m1", b"m2")) and b"m3" in deliveries,
                what="the three refused messages consumed again",
                timeout=20.0,
            )
            await c.drain()
        finally:
            await c.shutdown()
    assert sorted(deliveries) == [b"m0", b"m0", b"m1", b"m1", b"m2", b"m2", b"m3"]
    if orderly:
        assert deliveries == [b"m0", b"m0", b"m1", b"m1", b"m2", b"m2", b"m3"], "order is kept"
    logged = [r.getMessage() for r in caplog.records if "not a ConsumeStatus" in r.getMessage()]
    assert len(logged) == 1 and "returned True" in logged[0]
    assert await committed_offsets(server.broker, group, topic, 1) == [4]


async def test_ack_index_sends_back_only_the_messages_after_it(server: ServerProcess) -> None:
    """Java's ackIndex: CONSUME_SUCCESS with ack_index=i acknowledges msgs[0..i]; the rest are retried."""
    topic, group = unique("AckIndex"), unique("AckIndexGroup")
    first_batches: list[list[bytes]] = []
    seen: list[MessageExt] = []

    async def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        seen.extend(msgs)
        if msgs[0].reconsume_times == 0:
            first_batches.append([m.body for m in msgs])
            ctx.ack_index = 0  # only the first message of a first delivery is done
        return ConsumeStatus.CONSUME_SUCCESS

    await create_topic(server.broker, topic, 2)
    await produce(server.namesrv, topic, 24)
    c = consumer(server.namesrv, group, topic, listener, consume_from_where=FIRST, consume_batch_max_size=4)
    await c.start()
    try:

        def settled() -> bool:
            firsts = {body for batch in first_batches for body in batch}
            retried = sum(1 for m in seen if m.reconsume_times == 1)
            return len(firsts) == 24 and retried == sum(len(b) - 1 for b in first_batches)

        await eventually(settled, what="the unacknowledged messages consumed again", timeout=20.0)
        await c.drain()
    finally:
        await c.shutdown()
    assert any(len(b) > 1 for b in first_batches), "some batches held more than one message"
    retried = sorted(body for batch in first_batches for body in batch[1:])
    again = sorted(m.body for m in seen if m.reconsume_times == 1)
    assert again == retried
    assert sorted({m.body for m in seen}) == sorted(f"m{i}".encode() for i in range(24))


async def test_orderly_manual_commit_and_rollback(server: ServerProcess) -> None:
    """auto_commit=False as Java's ConsumeOrderlyContext: SUCCESS moves on without committing, COMMIT
    commits everything consumed so far, ROLLBACK consumes everything since the last commit again."""
    topic, group = unique("ManualCommit"), unique("ManualCommitGroup")
    plan: dict[bytes, list[ConsumeStatus]] = {
        b"m1": [ConsumeStatus.COMMIT],
        b"m3": [ConsumeStatus.ROLLBACK, ConsumeStatus.COMMIT],
    }
    deliveries: list[bytes] = []

    async def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        ctx.auto_commit = False
        ctx.suspend_current_queue_time_ms = 10
        (msg,) = msgs
        deliveries.append(msg.body)
        steps = plan.get(msg.body)
        return steps.pop(0) if steps else ConsumeStatus.SUCCESS

    await create_topic(server.broker, topic, 1)
    await produce(server.namesrv, topic, 6)
    c = consumer(server.namesrv, group, topic, listener, orderly=True, consume_from_where=FIRST)
    await c.start()
    try:
        await eventually(lambda: b"m5" in deliveries, what="m5 consumed", timeout=20.0)
    finally:
        await c.shutdown()
    assert deliveries == [b"m0", b"m1", b"m2", b"m3", b"m2", b"m3", b"m4", b"m5"]
    assert await committed_offsets(server.broker, group, topic, 1) == [4], "m4, m5 never committed"

    again = Collector(ok=ConsumeStatus.SUCCESS)
    c2 = consumer(server.namesrv, group, topic, again, orderly=True, consume_from_where=FIRST)
    await c2.start()
    try:
        await eventually(lambda: len(again.deliveries) == 2, what="the uncommitted messages", timeout=20.0)
        await c2.drain()
    finally:
        await c2.shutdown()
    assert again.bodies == [b"m4", b"m5"]
    assert await committed_offsets(server.broker, group, topic, 1) == [6]


async def test_orderly_commit_or_rollback_with_auto_commit_on_commits_with_a_warning(
    server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """Java reads COMMIT and ROLLBACK under auto-commit as success, and says so."""
    topic, group = unique("AutoCommitRollback"), unique("AutoCommitRollbackGroup")
    got = Collector(ok=ConsumeStatus.ROLLBACK)

    await create_topic(server.broker, topic, 1)
    await produce(server.namesrv, topic, 3)
    c = consumer(server.namesrv, group, topic, got, orderly=True, consume_from_where=FIRST)
    with caplog.at_level(logging.WARNING, logger="tidemq.client.consumer"):
        await c.start()
        try:
            await eventually(lambda: len(got.deliveries) >= 3, what="3 messages", timeout=20.0)
            await c.drain()
        finally:
            await c.shutdown()
    assert got.bodies == [b"m0", b"m1", b"m2"]
    assert any("ROLLBACK" in r.getMessage() and "auto_commit" in r.getMessage() for r in caplog.records)
    assert await committed_offsets(server.broker, group, topic, 1) == [3]
