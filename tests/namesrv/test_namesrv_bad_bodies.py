"""Name-server requests whose body or header fields have the wrong type: SYSTEM_ERROR with a remark naming
the field, never Python exception text, and the name server keeps serving (issue 23, bad bodies)."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import orjson
import pytest

from tests.support import RawClient, ServerProcess
from tidemq.remoting.codes import RequestCode, ResponseCode

pytestmark = pytest.mark.e2e

#: Words of Python exception text that a remark must never carry.
PYTHON_TEXT = ("invalid literal", "object has no attribute", "Error -3", "unpack_from", "Traceback", "'list'")


def _header(broker_id: str = "0", **extra: str) -> dict[str, str]:
    return {
        "brokerName": "bk-bad",
        "brokerAddr": "127.0.0.1:7",
        "clusterName": "C1",
        "haServerAddr": "127.0.0.1:7",
        "brokerId": broker_id,
    } | extra


def _body(table: Any = None, wrapper: Any = None, version: Any = None) -> bytes:
    if wrapper is None:
        wrapper = {
            "dataVersion": version if version is not None else {"counter": 1},
            "topicConfigTable": table,
        }
    return orjson.dumps({"topicConfigSerializeWrapper": wrapper})


def _topic(**fields: Any) -> dict[str, Any]:
    return {"topicName": "T", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6} | fields


CASES: list[tuple[str, dict[str, str], bytes, str]] = [
    ("table a list", _header(), _body(table=[_topic()]), "topicConfigTable"),
    ("wrapper a list", _header(), _body(wrapper=[]), "topicConfigSerializeWrapper"),
    ("body an array", _header(), b"[]", "expected an object"),
    ("topic config a string", _header(), _body(table={"T": "x"}), "topicConfigTable"),
    ("queue count a word", _header(), _body(table={"T": _topic(readQueueNums="abc")}), "readQueueNums"),
    ("perm a list", _header(), _body(table={"T": _topic(perm=[6])}), "perm"),
    ("dataVersion a number", _header(), _body(table={}, version=5), "dataVersion"),
    ("brokerId a word", _header("abc"), _body(table={}), "brokerId"),
    ("compressed garbage", _header(compressed="true"), b"not zlib", "compressed"),
    (
        "compressed, cut short",
        _header(compressed="true"),
        zlib.compress(struct.pack(">i", 40) + b"{}"),
        "compressed",
    ),
    (
        "compressed, queue count a word",
        _header(compressed="true"),
        zlib.compress(struct.pack(">i", 2) + b"{}" + struct.pack(">ii", 1, 9) + b"T x 4 6 0"),
        "readQueueNums",
    ),
]


async def test_wrong_types_are_named_not_python_text(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ns = ServerProcess(tmp_path / "ns", command="namesrv").start()
    try:
        c = await RawClient.open(ns.namesrv)
        for what, header, body, field in CASES:
            resp = await c.call(RequestCode.REGISTER_BROKER, header, body)
            remark = resp.remark or ""
            assert resp.code == ResponseCode.SYSTEM_ERROR, (what, resp.code, remark)
            assert field in remark, (what, remark)
            assert not any(text in remark for text in PYTHON_TEXT), (what, remark)
        version = await c.call(RequestCode.QUERY_DATA_VERSION, {"brokerAddr": "127.0.0.1:7"}, b"[1]")
        assert version.code == ResponseCode.SYSTEM_ERROR and "expected an object" in (version.remark or "")
        version = await c.call(RequestCode.QUERY_DATA_VERSION, {"brokerAddr": "127.0.0.1:7"}, b"{x")
        assert version.code == ResponseCode.SYSTEM_ERROR and "not JSON" in (version.remark or "")
        good = await c.call(RequestCode.REGISTER_BROKER, _header(), _body(table={"T": _topic()}))
        assert good.code == ResponseCode.SUCCESS
        route = await c.route("T")
        assert route is not None and route["queueDatas"][0]["readQueueNums"] == 4
        c.close()
        log = ns.log_path.read_text(errors="replace")
        assert "Traceback" not in log, log[-3000:]
    finally:
        assert ns.stop() == 0
