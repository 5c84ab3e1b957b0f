"""INVOKE_BROKER_TO_RESET_OFFSET against a real server: an online push consumer is moved back and reads
again; with no consumer online the broker says CONSUMER_NOT_ONLINE and Admin commits the offsets itself."""

from __future__ import annotations

import pytest

from tests.consumer_support import Collector, caught_up, committed_offsets, max_offsets, produce
from tests.support import RawClient, ServerProcess, create_topic, eventually, unique
from tidemq.client.admin import Admin
from tidemq.remoting.codes import RequestCode, ResponseCode

pytestmark = pytest.mark.e2e


async def test_online_consumer_is_reset_to_earliest_and_consumes_again(server: ServerProcess) -> None:
    topic, group = unique("ResetOnline"), unique("ResetOnlineGroup")
    await create_topic(server.broker, topic, 2, routed_by=server.namesrv)
    await produce(server.namesrv, topic, 6)
    got = Collector()
    async with caught_up(server.namesrv, group, topic, got, 6):
        seen = len(got.bodies)
        async with Admin(server.namesrv) as admin:
            done = await admin.reset_offset(group, topic, "earliest")
        assert sorted(done.values()) == [0, 0]
        # Without the broker telling the online consumer, it would keep its own offsets and never
        # read these six again.
        await eventually(lambda: len(got.bodies) >= seen + 6, what="6 consumed again", timeout=30.0)
        assert sorted(got.bodies[seen : seen + 6]) == sorted(b"m%d" % i for i in range(6))


async def test_no_consumer_online_is_consumer_not_online_and_admin_commits(server: ServerProcess) -> None:
    topic, group = unique("ResetOffline"), unique("ResetOfflineGroup")
    await create_topic(server.broker, topic, 2, routed_by=server.namesrv)
    await produce(server.namesrv, topic, 4)
    raw = await RawClient.open(server.broker)
    try:
        for q in range(2):
            await raw.call(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                {"consumerGroup": group, "topic": topic, "queueId": str(q), "commitOffset": "1"},
            )
        ext = {"topic": topic, "group": group, "timestamp": "0", "isForce": "true"}
        answer = await raw.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext)
        assert answer.code == ResponseCode.CONSUMER_NOT_ONLINE, answer.remark
        assert group in (answer.remark or "")
        unknown = await raw.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext | {"topic": unique("NoSuch")})
        assert unknown.code == ResponseCode.SYSTEM_ERROR and "no topic" in (unknown.remark or "")
    finally:
        raw.close()
    async with Admin(server.namesrv) as admin:
        done = await admin.reset_offset(group, topic, "latest")
    assert sorted(done.values()) == sorted(await max_offsets(server.broker, topic, 2))
    assert await committed_offsets(server.broker, group, topic, 2) == await max_offsets(
        server.broker, topic, 2
    )
