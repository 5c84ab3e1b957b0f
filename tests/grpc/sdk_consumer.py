"""Drive the official RocketMQ 5.x Python SDK's SimpleConsumer (rocketmq-python-client) from a test, one JSON
command a line on stdin, one JSON answer a line on stdout: run as a subprocess (the SDK's protobuf types
cannot share a process with tidemq.grpc's; see sdk_producer.py).

    python sdk_consumer.py ENDPOINT GROUP TOPIC FILTER_TYPE EXPRESSION AWAIT_S
    {"op": "receive", "max": 8, "invisible_s": 10}  -> {"ok": true, "messages": [...], "elapsed_ms": n}
    {"op": "ack", "ids": [message ids]}              -> {"ok": true, "results": [...]}
    {"op": "change", "id": message id, "invisible_s": 1}
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
from rocketmq.v5.model.filter_expression import FilterType


def describe(msg: Any) -> dict[str, Any]:
    return {
        "body": msg.body.decode(),
        "tag": msg.tag,
        "keys": sorted(msg.keys),
        "message_id": msg.message_id,
        "message_group": msg.message_group,
        "delivery_attempt": msg.delivery_attempt,
        "properties": dict(msg.properties),
        "born_timestamp": msg.born_timestamp,
        "delivery_timestamp": msg.delivery_timestamp,
        "corrupted": msg.corrupted,
    }


def main() -> None:
    endpoint, group, topic, filter_type, expression, await_s = sys.argv[1:7]
    kind = FilterType.SQL if filter_type == "SQL92" else FilterType.TAG
    consumer = SimpleConsumer(
        ClientConfiguration(endpoint, Credentials()),
        group,
        {topic: FilterExpression(expression, kind)},
        await_duration=int(await_s),
    )
    consumer.startup()
    held: dict[str, Any] = {}
    print(json.dumps({"ok": True, "ready": True}), flush=True)
    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            started = time.monotonic()
            try:
                if cmd["op"] == "receive":
                    got = consumer.receive(cmd["max"], cmd["invisible_s"]) or []
                    for msg in got:
                        held[msg.message_id] = msg
                    answer: dict[str, Any] = {"ok": True, "messages": [describe(m) for m in got]}
                elif cmd["op"] == "ack":
                    results = []
                    for mid in cmd["ids"]:
                        try:
                            consumer.ack(held[mid])
                            results.append("ok")
                        except Exception as exc:
                            results.append(f"{type(exc).__name__}: {exc}")
                    answer = {"ok": True, "results": results}
                elif cmd["op"] == "change":
                    consumer.change_invisible_duration(held[cmd["id"]], cmd["invisible_s"])
                    answer = {"ok": True}
                else:
                    answer = {"ok": False, "error": f"unknown op {cmd['op']}"}
            except Exception as exc:
                answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            answer["elapsed_ms"] = int((time.monotonic() - started) * 1000)
            print(json.dumps(answer), flush=True)
    finally:
        consumer.shutdown()


if __name__ == "__main__":
    main()
