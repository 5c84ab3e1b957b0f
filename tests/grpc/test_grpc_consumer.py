"""The gRPC endpoint's consumer side against the official Python SDK's SimpleConsumer (run as a subprocess:
tests/grpc/sdk_consumer.py): receive, change invisible duration (a nack), max attempts into the group's
DLQ, read back by tidemq's remoting consumer."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.consumer_support import drain
from tests.grpc.test_grpc_endpoint import sdk_send
from tests.support import RawClient, ServerProcess, create_topic, unique
from tidemq.remoting.codes import RequestCode

pytestmark = pytest.mark.e2e

SDK_CONSUMER = Path(__file__).with_name("sdk_consumer.py")


class SdkConsumer:
    """A SimpleConsumer in a subprocess, driven one JSON command at a time."""

    def __init__(
        self,
        endpoint: str,
        group: str,
        topic: str,
        expression: str = "*",
        kind: str = "TAG",
        await_s: int = 5,
    ) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(SDK_CONSUMER), endpoint, group, topic, kind, expression, str(await_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.call_raw(None)["ready"]

    def call_raw(self, cmd: dict[str, Any] | None) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if cmd is not None:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                err = self.proc.stderr.read() if self.proc.stderr else ""
                raise AssertionError(f"SDK consumer died: {err[-3000:]}")
            if line.startswith("{"):
                return dict(json.loads(line))

    def receive(self, max_num: int = 32, invisible_s: int = 10) -> tuple[list[dict[str, Any]], int]:
        answer = self.call_raw({"op": "receive", "max": max_num, "invisible_s": invisible_s})
        assert answer["ok"], answer
        return answer["messages"], answer["elapsed_ms"]

    def receive_until(self, count: int, timeout: float = 30, invisible_s: int = 10) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            got += self.receive(32, invisible_s)[0]
        return got

    def ack(self, messages: list[dict[str, Any]]) -> list[str]:
        answer = self.call_raw({"op": "ack", "ids": [m["message_id"] for m in messages]})
        assert answer["ok"], answer
        return list(answer["results"])

    def change(self, message: dict[str, Any], invisible_s: int) -> None:
        answer = self.call_raw({"op": "change", "id": message["message_id"], "invisible_s": invisible_s})
        assert answer["ok"], answer

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def consumer(*args: Any, **kwargs: Any) -> Iterator[SdkConsumer]:
    c = SdkConsumer(*args, **kwargs)
    try:
        yield c
    finally:
        c.close()


async def create_group(broker: str, group: str, **fields: Any) -> None:
    c = await RawClient.open(broker)
    try:
        body = orjson.dumps({"groupName": group, "consumeEnable": True, **fields})
        assert (await c.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)).code == 0
    finally:
        c.close()


async def test_max_attempts_moves_the_message_to_the_groups_dlq(server: ServerProcess) -> None:
    topic, group = unique("gc"), unique("GDLQ")
    await create_topic(server.broker, topic, 1, routed_by=server.namesrv)
    await create_group(server.broker, group, retryMaxTimes=1)  # max attempts 2
    for c in consumer(server.grpc, group, topic):
        sdk_send(server.grpc, topic, [{"body": "poison", "tag": "T"}])
        for attempt in (1, 2):
            (msg,) = c.receive_until(1)
            assert msg["delivery_attempt"] == attempt
            c.change(msg, 0)  # a nack: visible again at once
        assert c.receive()[0] == []  # attempt 3 went to the DLQ instead
    dead = await drain(server.namesrv, f"%DLQ%{group}", expect=1)
    assert [m.body for m in dead] == [b"poison"]
    assert dead[0].properties["RETRY_TOPIC"] == topic and dead[0].tags == "T"
