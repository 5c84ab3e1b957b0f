"""Interop: the real ali-ons (Node.js) client against a real ``tidemq server`` process.

Drives interop/ali-ons/produce.js and consume.js (see interop/ali-ons/NOTES.md for their
contract: JSON lines on stdout, logs on stderr, exit 0 ok / 1 error / 2 timeout) and checks
the results from the other side with the raw remoting client of tests/support.py.

The module uses the module-scoped ``server`` fixture (conftest.py), which runs with 1 s delay
levels so that retried messages come back within seconds. Every test uses its own topic and
group, so they do not disturb each other on the shared server.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.alions_support import QUEUES, node, require_harness
from tests.support import RawClient, ServerProcess, create_topic, run, server_log, unique
from tidemq.remoting.codes import RequestCode, ResponseCode

pytestmark = pytest.mark.e2e

require_harness()


def raw_produce(server: ServerProcess, topic: str, items: list[tuple[str, str | None, str | None]]) -> None:
    """Send (body, tags, keys) round-robin over the topic's queues; every send must succeed."""

    async def go() -> None:
        c = await RawClient.open(server.broker)
        try:
            for i, (body, tags, keys) in enumerate(items):
                sent = await c.send(topic, body.encode(), tags=tags, keys=keys, queue_id=i % QUEUES)
                assert sent.code == ResponseCode.SUCCESS, (i, sent)
        finally:
            c.close()

    run(go())


def raw_pull_all(server: ServerProcess, topic: str) -> list[Any]:
    async def go() -> list[Any]:
        c = await RawClient.open(server.broker)
        try:
            return [m for q in range(QUEUES) for m in await c.drain(topic, q, group=unique("raw_reader"))]
        finally:
            c.close()

    return run(go())


def consumer_offsets(server: ServerProcess, topic: str, group: str) -> tuple[dict[int, int], dict[int, int]]:
    """(committed offset, max offset) per queue, as the broker reports them."""

    async def go() -> tuple[dict[int, int], dict[int, int]]:
        c = await RawClient.open(server.broker)
        committed, maxes = {}, {}
        try:
            for q in range(QUEUES):
                r = await c.call(
                    RequestCode.QUERY_CONSUMER_OFFSET,
                    {"topic": topic, "consumerGroup": group, "queueId": str(q)},
                )
                committed[q] = int(r.ext_fields["offset"]) if r.code == ResponseCode.SUCCESS else -1
                r = await c.call(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)})
                assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
                maxes[q] = int(r.ext_fields["offset"])
        finally:
            c.close()
        return committed, maxes

    return run(go())


def prop(msg: Any, name: str) -> str | None:
    props = msg.properties
    return props.get(name) if isinstance(props, dict) else None


# --------------------------------------------------------------------------------------------------


def test_alions_produce_then_raw_pull(server: ServerProcess) -> None:
    n = 200
    topic = unique("ali_produce")
    run(create_topic(server.broker, topic, routed_by=server.namesrv))

    res = node(
        "produce.js",
        namesrv=server.namesrv,
        topic=topic,
        count=n,
        tags="TagP",
        keys_prefix="key-",
        body_prefix="pbody-",
    )
    assert res.rc == 0, res.describe() + "\nserver log:\n" + server_log(server)
    assert [r["i"] for r in res.records] == list(range(n)), res.describe()
    assert all(r["status"] == "SEND_OK" for r in res.records), res.records[:5]
    # Every ack names a real queue and offset, the (queueId, queueOffset) pairs are distinct.
    positions = {(r["queueId"], r["queueOffset"]) for r in res.records}
    assert len(positions) == n
    assert all(0 <= r["queueId"] < QUEUES and r["queueOffset"] >= 0 for r in res.records)
    assert all(r["msgId"] for r in res.records)
    assert len({r["queueId"] for r in res.records}) == QUEUES  # round-robin over all queues

    msgs = raw_pull_all(server, topic)
    got = sorted((m.body.decode(), prop(m, "TAGS"), prop(m, "KEYS")) for m in msgs)
    want = sorted((f"pbody-{i}", "TagP", f"key-{i}") for i in range(n))
    assert got == want
    # The stored positions are exactly the ones acknowledged to ali-ons.
    assert {(m.queue_id, m.queue_offset) for m in msgs} == positions


def test_raw_produce_then_alions_consume(server: ServerProcess) -> None:
    n = 200
    topic = unique("ali_consume")
    group = unique("CG_consume")
    run(create_topic(server.broker, topic, routed_by=server.namesrv))
    raw_produce(server, topic, [(f"cbody-{i}", "TagC", f"ck-{i}") for i in range(n)])

    res = node("consume.js", namesrv=server.namesrv, topic=topic, group=group, count=n)
    assert res.rc == 0, res.describe() + "\nserver log:\n" + server_log(server)
    bodies = [r["body"] for r in res.records]
    assert set(bodies) == {f"cbody-{i}" for i in range(n)}, res.describe()
    assert len(bodies) == n, "a message was delivered twice"
    for r in res.records:
        assert r["topic"] == topic
        assert r["tags"] == "TagC"
        assert r["keys"] == "ck-" + r["body"].split("-", 1)[1]
        assert r["reconsumeTimes"] == 0
        assert r["failed"] is False
    assert len({(r["queueId"], r["queueOffset"]) for r in res.records}) == n

    # close() committed the offsets (UPDATE_CONSUMER_OFFSET, flag 0, unquoted numbers).
    committed, maxes = consumer_offsets(server, topic, group)
    assert committed == maxes, f"committed {committed} != max {maxes}"


def test_alions_retry_reconsume_times(server: ServerProcess) -> None:
    n, fail_first = 6, 3
    topic = unique("ali_retry")
    group = unique("CG_retry")
    run(create_topic(server.broker, topic, routed_by=server.namesrv))
    raw_produce(server, topic, [(f"rbody-{i}", "TagR", f"rk-{i}") for i in range(n)])

    t0 = time.monotonic()
    res = node("consume.js", namesrv=server.namesrv, topic=topic, group=group, count=n, fail_first=fail_first)
    elapsed = time.monotonic() - t0
    assert res.rc == 0, res.describe() + "\nserver log:\n" + server_log(server)

    failed = [r for r in res.records if r["failed"]]
    ok = [r for r in res.records if not r["failed"]]
    assert len(failed) == fail_first, res.records
    assert all(r["reconsumeTimes"] == 0 for r in failed)
    assert {r["body"] for r in ok} == {f"rbody-{i}" for i in range(n)}
    assert len(ok) == n, "a message was handled successfully twice"

    failed_bodies = {r["body"] for r in failed}
    for r in ok:
        # ali-ons restores the topic from RETRY_TOPIC; tags and keys survive the retry.
        assert r["topic"] == topic, r
        assert r["tags"] == "TagR", r
        assert r["keys"] == "rk-" + r["body"].split("-", 1)[1], r
        want = 1 if r["body"] in failed_bodies else 0
        assert r["reconsumeTimes"] == want, r
    # Failed messages come back after the deliveries that failed them.
    order = [(r["body"], r["failed"]) for r in res.records]
    for body in failed_bodies:
        assert order.index((body, True)) < order.index((body, False))
    # Short delay levels: the retry comes within seconds, not Java's 10 s / 30 s polls.
    assert elapsed < 30, f"retry took {elapsed:.1f} s"


def test_alions_tag_filter(server: ServerProcess) -> None:
    topic = unique("ali_tags")
    group = unique("CG_tags")
    run(create_topic(server.broker, topic, routed_by=server.namesrv))
    # Untagged messages (no TAGS property, tags code 0) pass ali-ons' client-side tag check
    # (NOTES.md), so only the broker's filter on the pull's subscription keeps them out.
    tags: list[str | None] = ["A", "B", "C", None, "AB", "D"]
    items = [(f"tbody-{i}", tags[i % len(tags)], f"tk-{i}") for i in range(96)]
    raw_produce(server, topic, items)
    wanted = {body for body, tag, _ in items if tag in ("A", "B")}

    res = node(
        "consume.js", namesrv=server.namesrv, topic=topic, group=group, count=len(wanted), tags="A || B"
    )
    assert res.rc == 0, res.describe() + "\nserver log:\n" + server_log(server)
    unwanted = [r for r in res.records if r["tags"] not in ("A", "B")]
    assert not unwanted, f"delivered outside 'A || B': {unwanted[:5]}"
    assert {r["body"] for r in res.records} == wanted
    assert len(res.records) == len(wanted)
