"""Consumer-side broker commands against a real server: registry, offsets, locks, retry and DLQ, delays."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import orjson
import pytest

from tests.consumer_support import Collector, check_property_rules, consumer, produce, property_rules_scenario
from tests.support import RawClient, ServerProcess, eventually
from tidemq.remoting import jsonx
from tidemq.remoting.codes import RequestCode, ResponseCode

pytestmark = pytest.mark.e2e


async def test_heartbeat_lists_consumers_and_notifies_on_join_and_leave(server: ServerProcess) -> None:
    a = await RawClient.open(server.broker, "127.0.0.1@a")
    b = await RawClient.open(server.broker, "127.0.0.1@b")
    assert (await a.heartbeat("JoinGroup", {"JoinTopic": "*"})).code == ResponseCode.SUCCESS
    listed = await a.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "JoinGroup"})
    assert orjson.loads(listed.body)["consumerIdList"] == ["127.0.0.1@a"]
    await b.heartbeat("JoinGroup", {"JoinTopic": "*"})
    await asyncio.sleep(0.2)
    notes = [r for r in a.received if r.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED]
    assert notes and notes[-1].ext_fields["consumerGroup"] == "JoinGroup"
    listed = await a.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "JoinGroup"})
    assert sorted(orjson.loads(listed.body)["consumerIdList"]) == ["127.0.0.1@a", "127.0.0.1@b"]
    before = len(a.received)
    b.close()
    await asyncio.sleep(0.3)
    assert len(a.received) > before, "closing a member's connection must notify the rest of the group"
    listed = await a.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "JoinGroup"})
    assert orjson.loads(listed.body)["consumerIdList"] == ["127.0.0.1@a"]
    resp = await a.call(
        RequestCode.UNREGISTER_CLIENT, {"clientID": "127.0.0.1@a", "consumerGroup": "JoinGroup"}
    )
    assert resp.code == ResponseCode.SUCCESS
    empty = await a.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "JoinGroup"})
    assert empty.code == ResponseCode.SYSTEM_ERROR and "no consumer" in (empty.remark or "")
    # the retry topic of a clustering group is created and routed as soon as the heartbeat is answered
    ns = await RawClient.open(server.namesrv)
    assert await ns.route("%RETRY%JoinGroup") is not None
    ns.close()
    a.close()


async def test_consumer_offsets_and_queue_offsets(server: ServerProcess) -> None:
    c = await RawClient.open(server.broker)
    before = int(time.time() * 1000)
    for i in range(5):
        await c.send("Offsets", f"{i}".encode())
        await asyncio.sleep(0.02)
    q = {"consumerGroup": "OffGroup", "topic": "Offsets", "queueId": "0"}
    young = await c.call(RequestCode.QUERY_CONSUMER_OFFSET, q)
    assert young.code == ResponseCode.SUCCESS and young.ext_fields["offset"] == "0"
    await c.call(RequestCode.UPDATE_CONSUMER_OFFSET, q | {"commitOffset": "3"})
    assert (await c.call(RequestCode.QUERY_CONSUMER_OFFSET, q)).ext_fields["offset"] == "3"
    await c.call(RequestCode.UPDATE_CONSUMER_OFFSET, q | {"commitOffset": "-1"})  # ali-ons' "no offset"
    assert (await c.call(RequestCode.QUERY_CONSUMER_OFFSET, q)).ext_fields["offset"] == "3"
    await c.pull("Offsets", 0, 3, group="OffGroup", commit_offset=4)  # piggy-backed commit
    assert (await c.call(RequestCode.QUERY_CONSUMER_OFFSET, q)).ext_fields["offset"] == "4"
    queue = {"topic": "Offsets", "queueId": "0"}
    assert (await c.call(RequestCode.GET_MAX_OFFSET, queue)).ext_fields["offset"] == "5"
    assert (await c.call(RequestCode.GET_MIN_OFFSET, queue)).ext_fields["offset"] == "0"
    earliest = int((await c.call(RequestCode.GET_EARLIEST_MSG_STORETIME, queue)).ext_fields["timestamp"])
    assert before - 1000 <= earliest <= int(time.time() * 1000)
    by_time = await c.call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, queue | {"timestamp": str(earliest + 30)})
    assert by_time.ext_fields["offset"] in ("1", "2")
    past_end = await c.call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, queue | {"timestamp": str(2**50)})
    assert past_end.ext_fields["offset"] == "4"
    stats = await c.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "OffGroup", "topic": "Offsets"})
    table = jsonx.loads(stats.body)["offsetTable"]
    mq0 = jsonx.object_key(brokerName="broker-a", queueId=0, topic="Offsets")
    assert table[mq0]["brokerOffset"] == 5 and table[mq0]["consumerOffset"] == 4
    # the group pulled 2 messages (offsets 3 and 4) within the last minute
    assert jsonx.loads(stats.body)["consumeTps"] == 2 / 60
    c.close()


async def test_lock_batch_gives_each_queue_to_one_client(server: ServerProcess) -> None:
    c = await RawClient.open(server.broker)
    mqs = [{"topic": "Locked", "brokerName": "broker-a", "queueId": i} for i in range(3)]

    async def lock(client: str, queues: list[dict[str, object]]) -> list[int]:
        body = orjson.dumps({"consumerGroup": "LockGroup", "clientId": client, "mqSet": queues})
        resp = await c.call(RequestCode.LOCK_BATCH_MQ, body=body)
        return sorted(mq["queueId"] for mq in orjson.loads(resp.body)["lockOKMQSet"])

    assert await lock("c1", mqs[:2]) == [0, 1]
    assert await lock("c2", mqs) == [2]
    assert await lock("c1", mqs[:2]) == [0, 1]  # renewal of what c1 holds
    body = orjson.dumps({"consumerGroup": "LockGroup", "clientId": "c2", "mqSet": mqs[:1]})
    await c.call(RequestCode.UNLOCK_BATCH_MQ, body=body)  # c2 does not hold queue 0: no effect
    assert await lock("c2", mqs[:1]) == []
    body = orjson.dumps({"consumerGroup": "LockGroup", "clientId": "c1", "mqSet": mqs[:1]})
    await c.call(RequestCode.UNLOCK_BATCH_MQ, body=body)
    assert await lock("c2", mqs[:1]) == [0]
    c.close()


async def _send_back(
    c: RawClient, offset_msg_id: str, phys: int, group: str, delay: int = 0, max_times: int | None = None
) -> int:
    ext = {"offset": str(phys), "group": group, "delayLevel": str(delay), "originMsgId": offset_msg_id}
    if max_times is not None:
        ext["maxReconsumeTimes"] = str(max_times)
    return (await c.call(RequestCode.CONSUMER_SEND_MSG_BACK, ext)).code


async def _pull_until(c: RawClient, topic: str, offset: int, timeout: float = 10.0) -> list:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _, msgs = await c.pull(topic, 0, offset, suspend_ms=2000, timeout=5)
        if msgs:
            return msgs
    raise AssertionError(f"nothing arrived on {topic} at offset {offset}")


async def test_retry_then_dead_letter(server: ServerProcess) -> None:
    """Send-back goes to %RETRY%<group> with a delay and reconsumeTimes+1; past the max it goes to the DLQ."""

    c = await RawClient.open(server.broker)
    await c.heartbeat("RetryGroup", {"RetryTopic": "*"})
    await c.send("RetryTopic", b"payload", tags="T1", keys="order-1")
    _, (msg,) = await c.pull("RetryTopic", 0, 0)
    current = msg
    for attempt in range(1, 3):
        sent_at = time.monotonic()
        code = await _send_back(
            c, current.offset_msg_id, current.commit_log_offset, "RetryGroup", max_times=2
        )
        assert code == ResponseCode.SUCCESS
        (current,) = await _pull_until(c, "%RETRY%RetryGroup", attempt - 1)
        assert time.monotonic() - sent_at >= 0.8, "a retry is delayed (1 s in this server's levels)"
        assert current.reconsume_times == attempt
        assert current.body == b"payload" and current.tags == "T1"
        assert current.properties["RETRY_TOPIC"] == "RetryTopic"
        assert current.properties["ORIGIN_MESSAGE_ID"] == msg.offset_msg_id
    code = await _send_back(c, current.offset_msg_id, current.commit_log_offset, "RetryGroup", max_times=2)
    assert code == ResponseCode.SUCCESS
    (dead,) = await _pull_until(c, "%DLQ%RetryGroup", 0)
    assert dead.reconsume_times == 3 and dead.body == b"payload"
    ns = await RawClient.open(server.namesrv)
    assert await ns.route("%DLQ%RetryGroup") is not None
    ns.close()
    # delayLevel < 0 dead-letters at once
    await c.send("RetryTopic", b"straight-to-dlq")
    _, msgs = await c.pull("RetryTopic", 0, 1)
    assert await _send_back(c, msgs[0].offset_msg_id, msgs[0].commit_log_offset, "RetryGroup", delay=-1) == 0
    (dead2,) = await _pull_until(c, "%DLQ%RetryGroup", 1)
    assert dead2.body == b"straight-to-dlq"
    bad = await c.call(
        RequestCode.CONSUMER_SEND_MSG_BACK,
        {"offset": "999999999", "group": "RetryGroup", "delayLevel": "0"},
    )
    assert bad.code == ResponseCode.SYSTEM_ERROR
    c.close()


async def test_retry_topic_send_over_max_goes_to_dlq(server: ServerProcess) -> None:
    """A client resending to %RETRY% itself (send-back fallback) is dead-lettered past maxReconsumeTimes."""

    c = await RawClient.open(server.broker)
    r = await c.send("%RETRY%ResendGroup", b"again", reconsume_times=16, max_reconsume_times=16)
    assert r.code == ResponseCode.SUCCESS
    (dead,) = await _pull_until(c, "%DLQ%ResendGroup", 0)
    assert dead.body == b"again"
    c.close()


async def test_delayed_message_arrives_after_its_level(server: ServerProcess) -> None:
    c = await RawClient.open(server.broker)
    sent_at = time.monotonic()
    r = await c.send("Delayed", b"later", props={"DELAY": "2"})
    assert r.code == ResponseCode.SUCCESS and r.queue_id == 0
    resp, _ = await c.pull("Delayed", 0, 0)
    assert resp.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_OFFSET_MOVED)
    (msg,) = await _pull_until(c, "Delayed", 0)
    assert time.monotonic() - sent_at >= 0.8
    assert msg.properties["REAL_TOPIC"] == "Delayed" and msg.properties["DELAY"] == "2"  # as Java's
    c.close()


async def test_new_group_reads_a_young_queue_from_its_start_only_while_its_first_message_is_in_memory(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Java answers a new group's offset query with 0 only while the queue's first message lies within
    accessMessageInMemoryMaxRatio of RAM behind the log's end: at 0 % nothing older than the last
    record counts as in memory, so LAST_OFFSET starts at the end of each queue."""
    on_disk = ServerProcess(tmp_path / "data", "--access-message-in-memory-max-ratio", "0").start()
    try:
        for srv, expected in ((server, "0"), (on_disk, None)):
            c = await RawClient.open(srv.broker)
            for i in range(3):
                await c.send("Young", f"{i}".encode())
            q = {"consumerGroup": "NewGroup", "topic": "Young", "queueId": "0"}
            answer = await c.call(RequestCode.QUERY_CONSUMER_OFFSET, q)
            if expected is None:
                assert answer.code == ResponseCode.QUERY_NOT_FOUND, answer
            else:
                assert answer.code == ResponseCode.SUCCESS and answer.ext_fields["offset"] == expected
            c.close()
        await produce(on_disk.namesrv, "YoungPush", 6, prefix="old")
        got = Collector()
        c = consumer(on_disk.namesrv, "LastGroup", "YoungPush", got)  # from LAST_OFFSET by default
        await c.start()
        await eventually(lambda: bool(c.rebalancer.process_queues), what="queues assigned", timeout=20.0)
        await asyncio.sleep(0.5)
        await produce(on_disk.namesrv, "YoungPush", 2, prefix="new")
        await eventually(lambda: len(got.distinct()) >= 2, what="the new messages", timeout=20.0)
        await asyncio.sleep(0.3)
        await c.shutdown()
        assert got.distinct() == {b"new0", b"new1"}
    finally:
        assert on_disk.stop() == 0


async def test_stored_properties_of_retries_dead_letters_delays_and_batches_are_javas(
    server: ServerProcess,
) -> None:
    """The same rules tests/interop/test_real_rocketmq_clients.py checks against real brokers."""

    c = await RawClient.open(server.broker)
    await c.create_topic("PropRules", 1)
    c.close()
    deliveries, dlq = await property_rules_scenario(server.namesrv, "PropRules", "PropRulesGroup")
    c = await RawClient.open(server.broker)
    dead = await c.drain(dlq, 0)
    c.close()
    check_property_rules(deliveries, dead, "PropRules", "PropRulesGroup", plain_keeps_wait=False)
