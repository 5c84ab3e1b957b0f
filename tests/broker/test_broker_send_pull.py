"""Send and pull against a real ``tidemq server``: codes, offsets, filtering, long polling, batches."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.support import RawClient, ServerProcess
from tidemq.record import decode_offset_msg_id
from tidemq.remoting.codes import RequestCode, ResponseCode

pytestmark = pytest.mark.e2e


async def test_send_v1_v2_and_pull_round_trip(server: ServerProcess) -> None:
    c = await RawClient.open(server.broker)
    r1 = await c.send("SendPull", b"one", tags="A", keys="k1 k2", code=RequestCode.SEND_MESSAGE)
    r2 = await c.send("SendPull", b"two", tags="B")
    assert (r1.code, r2.code) == (ResponseCode.SUCCESS, ResponseCode.SUCCESS)
    assert (r1.queue_offset, r2.queue_offset) == (0, 1)
    host, phys = decode_offset_msg_id(r2.msg_id)
    assert host == server.broker and phys > 0
    resp, msgs = await c.pull("SendPull", 0, 0)
    assert resp.code == ResponseCode.SUCCESS
    assert [m.body for m in msgs] == [b"one", b"two"]
    assert msgs[0].tags == "A" and msgs[0].keys == "k1 k2"
    assert msgs[0].properties["CLUSTER"] == "DefaultCluster"
    assert msgs[1].offset_msg_id == r2.msg_id
    assert resp.ext_fields["nextBeginOffset"] == "2"
    assert (resp.ext_fields["minOffset"], resp.ext_fields["maxOffset"]) == ("0", "2")
    assert resp.ext_fields["suggestWhichBrokerId"] == "0"
    c.close()


async def test_send_response_carries_region_and_trace(server: ServerProcess) -> None:
    c = await RawClient.open(server.broker)
    ext = {
        "a": "PG",
        "b": "Region",
        "c": "TBW102",
        "d": "4",
        "e": "1",
        "f": "0",
        "g": "1",
        "h": "0",
        "i": "",
    }
    resp = await c.call(RequestCode.SEND_MESSAGE_V2, ext, b"x")
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert resp.ext_fields["MSG_REGION"] == "DefaultRegion"
    assert resp.ext_fields["TRACE_ON"] in ("true", "false")
    assert resp.ext_fields["queueId"] == "1"
    c.close()


async def test_pull_status_codes(server: ServerProcess) -> None:
    c = await RawClient.open(server.broker)
    await c.send("PullCodes", b"a")
    resp, _ = await c.pull("PullCodes", 0, 1)  # caught up, no suspend flag
    assert resp.code == ResponseCode.PULL_NOT_FOUND and resp.ext_fields["nextBeginOffset"] == "1"
    resp, _ = await c.pull("PullCodes", 0, 5)  # past the end
    assert resp.code == ResponseCode.PULL_OFFSET_MOVED and resp.ext_fields["nextBeginOffset"] == "1"
    resp, _ = await c.pull("PullCodes", 3, 0)  # empty queue at offset 0
    assert resp.code == ResponseCode.PULL_NOT_FOUND
    resp, _ = await c.pull("PullCodes", 3, 7)  # empty queue, offset > 0
    assert resp.code == ResponseCode.PULL_OFFSET_MOVED
    resp, _ = await c.pull("PullCodes", 99, 0)
    assert resp.code == ResponseCode.SYSTEM_ERROR and "queueId[99] is illegal" in (resp.remark or "")
    resp, _ = await c.pull("NoSuchTopicHere", 0, 0)
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST
    resp, _ = await c.pull("PullCodes", 0, 0, expression=None)  # no subscription posted, none registered
    assert resp.code == ResponseCode.SUBSCRIPTION_NOT_EXIST
    c.close()


async def test_tag_filtering_scans_past_non_matching(server: ServerProcess) -> None:
    c = await RawClient.open(server.broker)
    for i in range(10):
        await c.send("Tags", f"m{i}".encode(), tags="A" if i % 3 == 0 else "B")
    await c.send("Tags", b"untagged")
    resp, msgs = await c.pull("Tags", 0, 0, expression="A")
    assert [m.body for m in msgs] == [b"m0", b"m3", b"m6", b"m9"]
    assert resp.ext_fields["nextBeginOffset"] == "11"
    resp, msgs = await c.pull("Tags", 0, 10, expression="A || C")
    assert resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY and resp.ext_fields["nextBeginOffset"] == "11"
    _, msgs = await c.pull("Tags", 0, 0, expression="*")
    assert len(msgs) == 11
    # the subscription registered by a heartbeat is used when the pull posts none
    assert (await c.heartbeat("TagGroup", {"Tags": "B"})).code == ResponseCode.SUCCESS
    _, msgs = await c.pull("Tags", 0, 0, group="TagGroup", expression=None)
    assert [m.tags for m in msgs] == ["B"] * 6
    c.close()


async def test_long_polling_answers_when_a_message_lands(server: ServerProcess) -> None:
    consumer = await RawClient.open(server.broker)
    producer = await RawClient.open(server.broker)
    await producer.send("LongPoll", b"first")
    started = time.monotonic()
    pull = asyncio.create_task(consumer.pull("LongPoll", 0, 1, suspend_ms=15_000, timeout=20))
    await asyncio.sleep(0.3)
    assert not pull.done(), "a caught-up pull with the suspend flag must be held"
    sent_at = time.monotonic()
    await producer.send("LongPoll", b"second")
    resp, msgs = await pull
    assert resp.code == ResponseCode.SUCCESS and [m.body for m in msgs] == [b"second"]
    assert time.monotonic() - sent_at < 2.0, "held pull must be answered on arrival, not at its timeout"
    assert time.monotonic() - started < 5
    consumer.close()
    producer.close()


async def test_woken_pull_is_answered_before_the_send_that_woke_it(server: ServerProcess) -> None:
    """The consumer waits on the held pull, the producer only on its acknowledgement: on one connection
    carrying both, the pull's answer must come first on the wire."""

    c = await RawClient.open(server.broker)
    await c.send("WakeOrder", b"first")
    answered: list[str] = []
    pull = asyncio.create_task(c.pull("WakeOrder", 0, 1, suspend_ms=15_000, timeout=20))
    pull.add_done_callback(lambda _: answered.append("pull"))
    await asyncio.sleep(0.3)
    assert not pull.done()
    send = asyncio.create_task(c.send("WakeOrder", b"second"))
    send.add_done_callback(lambda _: answered.append("send"))
    (resp, msgs), sent = await pull, await send
    await asyncio.sleep(0)  # a task awaited after it finished has not run its done callbacks yet
    assert resp.code == ResponseCode.SUCCESS and [m.body for m in msgs] == [b"second"]
    assert sent.code == ResponseCode.SUCCESS
    assert answered == ["pull", "send"]
    c.close()


async def test_long_polling_times_out_with_not_found(server: ServerProcess) -> None:
    c = await RawClient.open(server.broker)
    await c.send("LongPollTimeout", b"x")
    started = time.monotonic()
    resp, _ = await c.pull("LongPollTimeout", 0, 1, suspend_ms=600, timeout=5)
    elapsed = time.monotonic() - started
    assert resp.code == ResponseCode.PULL_NOT_FOUND and resp.ext_fields["nextBeginOffset"] == "1"
    assert 0.5 <= elapsed < 3
    # a message that does not match the held pull's tag does not wake it
    pull = asyncio.create_task(c.pull("LongPollTimeout", 0, 1, expression="X", suspend_ms=800, timeout=5))
    await asyncio.sleep(0.1)
    await (await RawClient.open(server.broker)).send("LongPollTimeout", b"y", tags="Y")
    await asyncio.sleep(0.2)
    assert not pull.done()
    resp, _ = await pull
    assert resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY  # rerun at timeout scans past the Y message
    c.close()


async def test_batch_send_assigns_consecutive_offsets(server: ServerProcess) -> None:
    c = await RawClient.open(server.broker)
    sent = await c.send_batch("Batch", [f"b{i}".encode() for i in range(32)], queue_id=2)
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    assert sent.queue_id == 2 and sent.queue_offset == 0
    ids = sent.msg_id.split(",")
    assert len(ids) == 32 and len(set(ids)) == 32
    _, msgs = await c.pull("Batch", 2, 0)
    assert [m.body for m in msgs] == [f"b{i}".encode() for i in range(32)]
    assert [m.queue_offset for m in msgs] == list(range(32))
    # the batch's own properties (WAIT=true) are appended to each message's, as 4.9.7 stores them
    assert msgs[5].properties["WAIT"] == "true"
    assert msgs[5].properties["UNIQ_KEY"] == f"U{5:031d}"
    c.close()


async def test_bad_sends_get_protocol_errors(server: ServerProcess) -> None:
    c = await RawClient.open(server.broker)
    assert (await c.send("bad topic!", b"x")).code == ResponseCode.SYSTEM_ERROR
    assert (await c.send("T" * 200, b"x")).code == ResponseCode.SYSTEM_ERROR
    assert (await c.send("SCHEDULE_TOPIC_XXXX", b"x")).code == ResponseCode.SYSTEM_ERROR
    big = await c.send("BigBody", b"x" * (4 * 1024 * 1024 + 1))
    assert big.code == ResponseCode.MESSAGE_ILLEGAL and "exceeds" in (big.remark or "")
    assert (await c.send("QueueTooHigh", b"x", queue_id=500)).code == ResponseCode.SYSTEM_ERROR
    missing = await c.call(RequestCode.SEND_MESSAGE_V2, {"a": "PG", "b": "T"}, b"x")
    assert missing.code == ResponseCode.SYSTEM_ERROR
    assert "missing required field 'defaultTopic'" in (missing.remark or "")
    unknown = await c.call(9999)
    assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert "9999" in (unknown.remark or "")
    # the connection still works after all of that
    assert (await c.send("StillFine", b"ok")).code == ResponseCode.SUCCESS
    c.close()


async def test_a_pull_answers_up_to_the_brokers_max_transfer_count(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Java's default of 32 records a pull, and ``--max-transfer-count`` for readers of a whole backlog."""
    bodies = [f"m{i}".encode() for i in range(300)]
    c = await RawClient.open(server.broker)
    assert (await c.send_batch("Transfer", bodies, queue_id=0)).code == ResponseCode.SUCCESS
    _, default = await c.pull("Transfer", 0, 0, max_nums=300)
    c.close()
    assert [m.body for m in default] == bodies[:32]
    wide = ServerProcess(tmp_path / "data", "--max-transfer-count", "200").start()
    try:
        c = await RawClient.open(wide.broker)
        assert (await c.send_batch("Transfer", bodies, queue_id=0)).code == ResponseCode.SUCCESS
        resp, first = await c.pull("Transfer", 0, 0, max_nums=300)
        _, asked = await c.pull("Transfer", 0, 200, max_nums=50)
        c.close()
    finally:
        wide.stop()
    assert [m.body for m in first] == bodies[:200] and resp.ext_fields["nextBeginOffset"] == "200"
    assert [m.body for m in asked] == bodies[200:250]  # never more than the pull asks for
