"""The topic table at scale against a real server: a create registers only its own topic with the name
server (Java's registerIncrementBrokerData), and a journaled create survives a SIGKILL."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.support import RawClient, ServerProcess, unique
from tidemq.remoting.codes import RequestCode, ResponseCode


def _queues(route: dict[str, object] | None) -> list[int]:
    datas = route["queueDatas"] if route else []
    assert isinstance(datas, list)
    return [q["writeQueueNums"] for q in datas]


@pytest.mark.e2e
async def test_a_create_registers_only_its_topic_and_keeps_the_other_routes(
    fresh_server: ServerProcess,
) -> None:
    """A topic the name server was told to forget stays forgotten when another topic is created: the
    create sent the name server that one topic, not the whole table; the other topics keep their route."""
    kept, forgotten, new = unique("keep"), unique("forgot"), unique("new")
    broker, ns = await RawClient.open(fresh_server.broker), await RawClient.open(fresh_server.namesrv)
    try:
        for topic in (kept, forgotten):
            assert (await broker.create_topic(topic, 4)).code == ResponseCode.SUCCESS
        assert _queues(await ns.route(forgotten)) == [4]
        await ns.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": forgotten})
        assert await ns.route(forgotten) is None

        assert (await broker.create_topic(new, 3)).code == ResponseCode.SUCCESS
        assert _queues(await ns.route(new)) == [3], "routed when the create is answered"
        assert _queues(await ns.route(kept)) == [4], "an increment keeps the other topics' routes"
        assert await ns.route(forgotten) is None, "the whole table was registered again"
    finally:
        broker.close()
        ns.close()


@pytest.mark.e2e
async def test_acknowledged_creates_and_deletes_survive_a_sigkill(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    topics = [unique(f"dur{i}") for i in range(80)]  # past the journal's first compaction
    try:
        broker = await RawClient.open(server.broker)
        try:
            for topic in topics:
                assert (await broker.create_topic(topic, 4)).code == ResponseCode.SUCCESS
            deleted = topics.pop()
            answer = await broker.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": deleted})
            assert answer.code == ResponseCode.SUCCESS
        finally:
            broker.close()
        server.kill()  # SIGKILL by PID: no close, no compaction
        server.start()
        ns, broker = await RawClient.open(server.namesrv), await RawClient.open(server.broker)
        try:
            for topic in topics:
                assert _queues(await ns.route(topic)) == [4], topic
            answer = await broker.call(RequestCode.GET_ALL_TOPIC_CONFIG)
            table = orjson.loads(answer.body)["topicConfigTable"]
            assert set(topics) <= set(table) and deleted not in table
        finally:
            ns.close()
            broker.close()
    finally:
        server.kill()
