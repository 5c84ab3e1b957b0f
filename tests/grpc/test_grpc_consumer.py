"""The gRPC endpoint's consumer side against the official Python SDK's SimpleConsumer (run as a subprocess:
tests/grpc/sdk_consumer.py) and raw MessagingService calls: receive what remoting and the SDK produced from
every queue, ack, redelivery after the invisible time, change invisible duration, TAG and SQL92 filters,
empty long polls, max attempts into the group's DLQ, FIFO groups, and a SIGKILL between receive and ack."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest

from tests.consumer_support import drain, produce
from tests.grpc.test_grpc_endpoint import sdk_send
from tests.support import RawClient, ServerProcess, create_topic, run, unique
from tidemq.grpc.proto import definition_pb2 as pb
from tidemq.grpc.proto import service_pb2 as spb
from tidemq.grpc.proto import service_pb2_grpc as spb_grpc
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


async def test_receive_from_remoting_and_sdk_producers_ack_then_an_empty_long_poll(
    server: ServerProcess,
) -> None:
    topic, group = unique("gc"), unique("GC")
    await create_topic(server.broker, topic, 4, routed_by=server.namesrv)
    await produce(server.namesrv, topic, 3, prefix="remoting-", tags=lambda i: "TagR")
    sdk_send(server.grpc, topic, [{"body": f"sdk-{i}", "tag": "TagS", "key": f"k{i}"} for i in range(2)])
    for c in consumer(server.grpc, group, topic):
        got = c.receive_until(5)
        assert sorted(m["body"] for m in got) == ["remoting-0", "remoting-1", "remoting-2", "sdk-0", "sdk-1"]
        assert all(m["delivery_attempt"] == 1 and not m["corrupted"] for m in got)
        sdk0 = next(m for m in got if m["body"] == "sdk-0")
        assert sdk0["tag"] == "TagS" and sdk0["keys"] == ["k0"]
        assert next(m for m in got if m["body"] == "remoting-0")["tag"] == "TagR"
        assert all(m["born_timestamp"] > 0 for m in got)
        assert c.ack(got) == ["ok"] * 5
        again, elapsed = c.receive()
        assert again == [] and 4000 <= elapsed < 12000, elapsed  # the 5 s long poll ran out


async def test_unacked_comes_back_with_attempt_2_and_change_invisible_duration(server: ServerProcess) -> None:
    topic, group = unique("gc"), unique("GC")
    await create_topic(server.broker, topic, 1, routed_by=server.namesrv)
    for c in consumer(server.grpc, group, topic):
        sdk_send(server.grpc, topic, [{"body": "a"}, {"body": "b"}])
        got = c.receive_until(2, invisible_s=10)
        received_at = time.monotonic()
        assert sorted(m["body"] for m in got) == ["a", "b"]
        b = next(m for m in got if m["body"] == "b")
        c.change(b, 1)  # visible again in a second
        back, _ = c.receive(32, 10)
        assert [(m["body"], m["delivery_attempt"]) for m in back] == [("b", 2)]
        assert time.monotonic() - received_at < 8, "b came back only after its first invisible time"
        assert c.ack(back) == ["ok"]
        a_again = c.receive_until(1, timeout=20)
        assert [(m["body"], m["delivery_attempt"]) for m in a_again] == [("a", 2)]
        assert time.monotonic() - received_at >= 9.5
        assert c.ack(a_again) == ["ok"]
        assert c.ack(a_again) == ["ok"]  # acked twice: the proxy says OK again


async def test_tag_and_sql92_filters(server: ServerProcess) -> None:
    topic = unique("gc")
    await create_topic(server.broker, topic, 2, routed_by=server.namesrv)
    for tags, sql in zip(
        consumer(server.grpc, unique("TAGS"), topic, "TagA || TagB"),
        consumer(server.grpc, unique("SQL"), topic, "color = 'red' AND n > 1", kind="SQL92"),
        strict=True,
    ):
        sdk_send(
            server.grpc,
            topic,
            [
                {"body": "a-red-1", "tag": "TagA", "props": {"color": "red", "n": "1"}},
                {"body": "b-red-2", "tag": "TagB", "props": {"color": "red", "n": "2"}},
                {"body": "c-blue-3", "tag": "TagC", "props": {"color": "blue", "n": "3"}},
                {"body": "c-red-4", "tag": "TagC", "props": {"color": "red", "n": "4"}},
            ],
        )
        by_tag = tags.receive_until(2)
        by_sql = sql.receive_until(2)
        assert sorted(m["body"] for m in by_tag) == ["a-red-1", "b-red-2"]
        assert sorted(m["body"] for m in by_sql) == ["b-red-2", "c-red-4"]
        assert by_sql[0]["properties"]["color"] == "red"
        assert tags.ack(by_tag) == ["ok"] * 2 and sql.ack(by_sql) == ["ok"] * 2
        assert tags.receive()[0] == [] and sql.receive()[0] == []  # the rest were passed over


async def test_fifo_group_withholds_a_queues_next_message_until_the_previous_is_acked(
    server: ServerProcess,
) -> None:
    topic, group = unique("gc"), unique("GFIFO")
    await create_topic(server.broker, topic, 1, routed_by=server.namesrv)
    await create_group(server.broker, group, consumeMessageOrderly=True)
    sent = [f"{g}-{i}" for i in range(3) for g in ("A", "B")]
    sdk_send(server.grpc, topic, [{"body": b, "group": b[0]} for b in sent])
    for c in consumer(server.grpc, group, topic):
        got: list[dict[str, Any]] = []
        while len(got) < len(sent):
            (msg,) = c.receive(1)[0]
            assert msg["message_group"] == msg["body"][0] and msg["delivery_attempt"] == 1
            if not got:
                withheld, elapsed = c.receive(1)
                assert withheld == [] and elapsed >= 4000  # the next one waits for this ack
            assert c.ack([msg]) == ["ok"]
            got.append(msg)
        assert [m["body"] for m in got] == sent  # the queue's order, so each group's order


def test_sigkill_between_receive_and_ack(tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = ServerProcess(data).start()
    topic, group = unique("gc"), unique("GKILL")
    try:
        run(create_topic(srv.broker, topic, 2, routed_by=srv.namesrv))
        for c in consumer(srv.grpc, group, topic):
            sdk_send(srv.grpc, topic, [{"body": f"k{i}"} for i in range(4)])
            got = c.receive_until(4)
            assert sorted(m["body"] for m in got) == ["k0", "k1", "k2", "k3"]
            acked = [m for m in got if m["body"] in ("k0", "k2")]
            assert c.ack(acked) == ["ok", "ok"]
            killed_at = time.monotonic()
            srv.kill()
    finally:
        srv.kill()
    srv = ServerProcess(data).start()
    try:
        for c in consumer(srv.grpc, group, topic):
            back = c.receive_until(2, timeout=30)
            assert sorted((m["body"], m["delivery_attempt"]) for m in back) == [("k1", 2), ("k3", 2)]
            assert time.monotonic() - killed_at >= 8, "redelivered before the invisible time"
            assert c.ack(back) == ["ok", "ok"]
            assert c.receive()[0] == []  # the acked ones never come back
    finally:
        srv.kill()


CLIENT = (("x-mq-client-id", "test-consumer@1"), ("x-mq-language", "PYTHON"))


async def raw_receive(
    stub: spb_grpc.MessagingServiceStub,
    group: str,
    topic: str,
    queue_id: int,
    batch: int = 32,
    invisible_s: int = 10,
    poll_s: int = 5,
) -> tuple[int, list[pb.Message]]:
    """One ReceiveMessage as an SDK sends it (naming the queue it picked): the status code and messages."""
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=batch,
    )
    request.invisible_duration.seconds = invisible_s
    request.long_polling_timeout.seconds = poll_s
    code, messages = -1, []
    async for response in stub.ReceiveMessage(request, metadata=CLIENT, timeout=poll_s + 10):
        if response.HasField("status"):
            code = response.status.code
        elif response.HasField("message"):
            messages.append(response.message)
    return code, messages


async def test_a_receive_takes_from_every_queue_whatever_queue_it_names(server: ServerProcess) -> None:
    """The proxy pops the broker's acting queue (-1): an SDK that names queue 0 still gets what waits in
    queues 1-3 at once, instead of long-polling an empty queue 0 (the lost/duplicated-message flake)."""
    topic, group = unique("gc"), unique("GALL")
    await create_topic(server.broker, topic, 4, routed_by=server.namesrv)
    async with grpc.aio.insecure_channel(server.grpc) as channel:
        stub = spb_grpc.MessagingServiceStub(channel)
        code, none = await raw_receive(stub, group, topic, 0, poll_s=5)
        assert code == pb.MESSAGE_NOT_FOUND and none == []
        await produce(server.namesrv, topic, 6, prefix="q")
        started = time.monotonic()
        code, got = await raw_receive(stub, group, topic, 0)
        assert time.monotonic() - started < 3, "the receive long-polled instead of taking what was there"
        assert code == pb.OK
        assert sorted(m.body for m in got) == [f"q{i}".encode() for i in range(6)]
        assert len({m.system_properties.queue_id for m in got}) == 4
        code, again = await raw_receive(stub, group, topic, 3, poll_s=5)
        assert code == pb.MESSAGE_NOT_FOUND and again == []  # all in flight, none handed out twice


async def test_ack_answers_for_stale_expired_and_forged_handles(server: ServerProcess) -> None:
    """The 5.x proxy's answers: a superseded (not expired) handle or a second ack is OK, as the broker
    acks any offset of the queue, yet the message stays in flight under its newer handle; an expired
    handle is INVALID_RECEIPT_HANDLE; an offset never handed out or a handle that does not parse is
    INTERNAL_SERVER_ERROR."""
    topic, group = unique("gc"), unique("GACK")
    await create_topic(server.broker, topic, 1, routed_by=server.namesrv)
    await produce(server.namesrv, topic, 2, prefix="s")
    async with grpc.aio.insecure_channel(server.grpc) as channel:
        stub = spb_grpc.MessagingServiceStub(channel)

        async def ack(handle: str) -> pb.Status:
            entry = spb.AckMessageEntry(message_id="m", receipt_handle=handle)
            answer = await stub.AckMessage(
                spb.AckMessageRequest(
                    group=pb.Resource(name=group), topic=pb.Resource(name=topic), entries=[entry]
                ),
                metadata=CLIENT,
            )
            assert answer.status.code == answer.entries[0].status.code
            return answer.entries[0].status

        async def change(handle: str, seconds: int) -> spb.ChangeInvisibleDurationResponse:
            request = spb.ChangeInvisibleDurationRequest(
                group=pb.Resource(name=group), topic=pb.Resource(name=topic), receipt_handle=handle
            )
            request.invisible_duration.seconds = seconds
            answer: spb.ChangeInvisibleDurationResponse = await stub.ChangeInvisibleDuration(
                request, metadata=CLIENT
            )
            return answer

        code, (s0, s1) = await raw_receive(stub, group, topic, 0)
        assert code == pb.OK
        old = s0.system_properties.receipt_handle
        changed = await change(old, 2)
        assert changed.status.code == pb.OK and changed.receipt_handle != old
        assert (await ack(old)).code == pb.OK  # superseded: OK, and acks nothing
        stale_change = await change(old, 30)
        assert stale_change.status.code == pb.INTERNAL_SERVER_ERROR
        _, back = await raw_receive(stub, group, topic, 0, poll_s=5)
        assert [(m.body, m.system_properties.delivery_attempt) for m in back] == [(b"s0", 2)]
        newest = back[0].system_properties.receipt_handle
        assert (await ack(newest)).code == pb.OK
        assert (await ack(newest)).code == pb.OK  # a second ack: OK again
        expired = await change(s1.system_properties.receipt_handle, 0)
        assert expired.status.code == pb.OK
        gone = await ack(expired.receipt_handle)
        assert gone.code == pb.INVALID_RECEIPT_HANDLE and "expired" in gone.message
        fields = newest.split(" ")
        fields[5], fields[1] = "99", str(int(time.time() * 1000))  # an offset never handed out
        forged = await ack(" ".join(fields))
        assert forged.code == pb.INTERNAL_SERVER_ERROR and forged.message == "ack failed: status is abnormal"
        garbled = await ack("not a handle")  # the 5.x proxy: its handle decoder throws, 50001
        assert garbled.code == pb.INTERNAL_SERVER_ERROR and garbled.message.startswith("Parse failed")


SDK_PUSH_CONSUMER = Path(__file__).with_name("sdk_push_consumer.py")


def push_consume(
    endpoint: str, group: str, topic: str, expect: int, fail_attempts: int = 1, sleep_s: float = 0
) -> list[dict[str, Any]]:
    """Run the SDK's PushConsumer until ``expect`` messages were consumed successfully: every delivery."""
    args = [endpoint, group, topic, str(expect), str(fail_attempts), "90", str(sleep_s)]
    proc = subprocess.run(
        [sys.executable, str(SDK_PUSH_CONSUMER), *args],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"body"')]


async def assert_group_has_nothing_left(server: ServerProcess, group: str, topic: str) -> None:
    async with grpc.aio.insecure_channel(server.grpc) as channel:
        code, left = await raw_receive(spb_grpc.MessagingServiceStub(channel), group, topic, 0, poll_s=5)
    assert code == pb.MESSAGE_NOT_FOUND and left == []


async def test_sdk_push_consumer_consumes_everything_and_failures_come_back(server: ServerProcess) -> None:
    topic, group = unique("gc"), unique("GPUSH")
    await create_topic(server.broker, topic, 4, routed_by=server.namesrv)
    await produce(server.namesrv, topic, 6, prefix="ok-")
    sdk_send(server.grpc, topic, [{"body": f"fail-{i}"} for i in range(2)])
    deliveries = push_consume(server.grpc, group, topic, expect=8, fail_attempts=1)
    succeeded = sorted(d["body"] for d in deliveries if not d["failed"])
    assert succeeded == sorted([f"ok-{i}" for i in range(6)] + ["fail-0", "fail-1"]), deliveries
    for body in ("fail-0", "fail-1"):
        assert [(d["attempt"], d["failed"]) for d in deliveries if d["body"] == body] == [
            (1, True),
            (2, False),
        ]
    assert all(d["attempt"] == 1 for d in deliveries if d["body"].startswith("ok-"))
    await assert_group_has_nothing_left(server, group, topic)


async def test_auto_renew_keeps_a_slow_push_consumers_message_invisible(server: ServerProcess) -> None:
    """A listener busy past the 60 s renew slice: the proxy renews the handle, so the message is not
    handed out again meanwhile, and the ack by the handle the client holds lands."""
    topic, group = unique("gc"), unique("GRENEW")
    await create_topic(server.broker, topic, 1, routed_by=server.namesrv)
    sdk_send(server.grpc, topic, [{"body": "slow"}])
    deliveries = push_consume(server.grpc, group, topic, expect=1, fail_attempts=0, sleep_s=72)
    assert [(d["body"], d["attempt"], d["failed"]) for d in deliveries] == [("slow", 1, False)]
    await assert_group_has_nothing_left(server, group, topic)
