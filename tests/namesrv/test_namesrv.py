"""Name server: registration, routes, cluster info, topic list, expiry (real processes and real objects)."""

from __future__ import annotations

import time

import orjson
import pytest

from tests.support import RawClient, ServerProcess
from tidemq.namesrv.route_info import RouteInfo, TopicDefinition
from tidemq.remoting import jsonx
from tidemq.remoting.codes import RequestCode, ResponseCode


def _register_body(topics: dict[str, int], counter: int = 1) -> bytes:
    table = {
        name: {
            "topicName": name,
            "readQueueNums": n,
            "writeQueueNums": n,
            "perm": 6,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": False,
        }
        for name, n in topics.items()
    }
    return orjson.dumps(
        {
            "filterServerList": [],
            "topicConfigSerializeWrapper": {
                "dataVersion": {"counter": counter, "timestamp": 1},
                "topicConfigTable": table,
            },
        }
    )


def _header(name: str, addr: str, broker_id: int = 0, cluster: str = "C1") -> dict[str, str]:
    return {
        "brokerName": name,
        "brokerAddr": addr,
        "clusterName": cluster,
        "haServerAddr": addr,
        "brokerId": str(broker_id),
    }


@pytest.mark.e2e
async def test_register_route_cluster_and_unregister(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ns = ServerProcess(tmp_path / "ns", command="namesrv").start()
    try:
        c = await RawClient.open(ns.namesrv)
        resp = await c.call(
            RequestCode.REGISTER_BROKER, _header("bk-a", "127.0.0.1:1"), _register_body({"T1": 4})
        )
        assert resp.code == ResponseCode.SUCCESS
        slave = await c.call(
            RequestCode.REGISTER_BROKER, _header("bk-a", "127.0.0.1:2", 1), _register_body({"T1": 4})
        )
        assert slave.ext_fields.get("masterAddr") == "127.0.0.1:1"
        await c.call(
            RequestCode.REGISTER_BROKER,
            _header("bk-b", "127.0.0.1:3", cluster="C2"),
            _register_body({"T1": 2, "T2": 1}),
        )
        route = await c.route("T1")
        assert route is not None
        assert {q["brokerName"]: q["writeQueueNums"] for q in route["queueDatas"]} == {
            "bk-a": 4,
            "bk-b": 2,
        }
        addrs = {d["brokerName"]: d["brokerAddrs"] for d in route["brokerDatas"]}
        assert addrs["bk-a"] == {"0": "127.0.0.1:1", "1": "127.0.0.1:2"}  # quoted numeric keys
        assert route["filterServerTable"] == {}
        missing = await c.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"})
        assert missing.code == ResponseCode.TOPIC_NOT_EXIST and "Nope" in (missing.remark or "")
        info = jsonx.loads((await c.call(RequestCode.GET_BROKER_CLUSTER_INFO)).body)
        assert info["clusterAddrTable"] == {"C1": ["bk-a"], "C2": ["bk-b"]}
        topics = orjson.loads((await c.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body)[
            "topicList"
        ]
        assert topics == ["T1", "T2"]
        bad_crc = await c.call(
            RequestCode.REGISTER_BROKER,
            _header("bk-c", "127.0.0.1:4") | {"bodyCrc32": "12345"},
            _register_body({"T3": 1}),
        )
        assert bad_crc.code == ResponseCode.SYSTEM_ERROR
        garbage = await c.call(RequestCode.REGISTER_BROKER, _header("bk-c", "127.0.0.1:4"), b"{not json")
        assert garbage.code == ResponseCode.SYSTEM_ERROR
        assert (
            await c.call(RequestCode.UNREGISTER_BROKER, _header("bk-b", "127.0.0.1:3", cluster="C2"))
        ).code == 0
        assert await c.route("T2") is None
        route = await c.route("T1")
        assert route is not None and [q["brokerName"] for q in route["queueDatas"]] == ["bk-a"]
        await c.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T1"})
        assert await c.route("T1") is None
        c.close()
    finally:
        assert ns.stop() == 0


@pytest.mark.e2e
async def test_broker_connection_close_removes_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ns = ServerProcess(tmp_path / "ns", command="namesrv").start()
    try:
        broker_side = await RawClient.open(ns.namesrv)
        await broker_side.call(
            RequestCode.REGISTER_BROKER, _header("gone", "127.0.0.1:9"), _register_body({"G": 1})
        )
        watcher = await RawClient.open(ns.namesrv)
        assert await watcher.route("G") is not None
        broker_side.close()
        deadline = time.monotonic() + 5
        while await watcher.route("G") is not None:
            assert time.monotonic() < deadline, "a closed broker channel must drop its routes"
        watcher.close()
    finally:
        ns.stop()


def test_broker_expiry_and_additive_registration() -> None:
    routes = RouteInfo(broker_expiry_s=0.05)
    routes.register("C", "h:1", "b", 0, "h:2", {"counter": 1}, [TopicDefinition("A", 4, 4, 6)], None)
    routes.register("C", "h:1", "b", 0, "h:2", {"counter": 2}, [TopicDefinition("B", 2, 2, 6)], None)
    assert routes.route("A") is not None and routes.route("B") is not None  # registration is additive
    time.sleep(0.1)
    assert routes.expire() == ["h:1"]
    assert routes.route("A") is None and routes.cluster_info()["clusterAddrTable"] == {}
