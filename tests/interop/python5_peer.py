"""The official RocketMQ 5.x Python SDK (rocketmq-python-client) as a test peer, printing JSON lines in the
same shape as the Java 5.x peer (interop/rocketmq-java/client5): run as a subprocess because the SDK
registers its own copy of the ``apache.rocketmq.v2`` protobuf types, which cannot share a process with
tidemq.grpc's.

    python python5_peer.py produce --endpoint E --topic T [--type normal|fifo|delay|transaction] ...
    python python5_peer.py simple-consume --endpoint E --topic T --group G [--expect N] ...
        (--ack-attempt N leaves earlier deliveries unacked; --change-invisible-seconds S also changes
        their invisible duration to S seconds, so they come back after S instead)
    python python5_peer.py probe --endpoint E --topic T --fifo-topic F --group G

``probe`` calls MessagingService directly with the SDK's generated stubs and prints each answer's status
(code and message) and the route and settings: what a front-end must answer the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

# The SDK logs under ~/logs/rocketmq_python, decided at import: keep it in the test's temp dir.
if "--home" in sys.argv:
    os.environ["HOME"] = sys.argv[sys.argv.index("--home") + 1]

import grpc
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub


def emit(**record: Any) -> None:
    print(json.dumps(record), flush=True)


def configuration(args: argparse.Namespace) -> ClientConfiguration:
    return ClientConfiguration(args.endpoint, Credentials(), request_timeout=10)


def received(event: str, m: Any) -> dict[str, Any]:
    return {
        "event": event,
        "id": m.message_id,
        "topic": m.topic,
        "body": m.body.decode(),
        "tag": m.tag,
        "keys": sorted(m.keys or []),
        "group": m.message_group,
        "delivery_timestamp": m.delivery_timestamp,
        "born_timestamp": m.born_timestamp,
        "attempt": m.delivery_attempt,
        "received_ms": int(time.time() * 1000),
        "properties": dict(sorted((m.properties or {}).items())),
    }


class Checker(TransactionChecker):  # type: ignore[misc]
    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.checked = threading.Event()

    def check(self, message: Any) -> Any:
        emit(**received("checked", message))
        self.checked.set()
        return TransactionResolution.COMMIT if self.answer == "commit" else TransactionResolution.ROLLBACK


def produce(args: argparse.Namespace) -> int:
    checker = Checker(args.check)
    producer = Producer(configuration(args), (args.topic,), checker)
    try:
        producer.startup()
    except Exception as exc:
        emit(event="start-error", exception=type(exc).__name__, message=str(exc))
        return 1
    failures = 0
    try:
        for i in range(args.count):
            body = f"{args.body_prefix}{i}"
            msg = Message()
            msg.topic = args.topic
            msg.body = body.encode()
            msg.keys = body
            if args.tag:
                msg.tag = args.tag
            group = None
            deliver_at = None
            if args.type == "fifo":
                group = f"g{i % args.groups}"
                msg.message_group = group
            elif args.type == "delay":
                deliver_at = int(time.time() + args.delay_ms / 1000 + 0.999)  # the SDK's unit: whole seconds
                msg.delivery_timestamp = deliver_at
            try:
                if args.type == "transaction":
                    tx = producer.begin_transaction()
                    receipt = producer.send(msg, tx)
                    if args.resolution == "commit":
                        tx.commit()
                    elif args.resolution == "rollback":
                        tx.rollback()
                else:
                    receipt = producer.send(msg)
                emit(
                    event="sent",
                    index=i,
                    id=receipt.message_id,
                    body=body,
                    group=group,
                    delivery_timestamp=deliver_at * 1000 if deliver_at else None,
                    sent_ms=int(time.time() * 1000),
                )
            except Exception as exc:
                failures += 1
                emit(event="send-error", index=i, exception=type(exc).__name__, message=str(exc))
        if args.type == "transaction" and args.resolution == "none":
            checker.checked.wait(args.linger)  # the server's back-check of the open transaction
    finally:
        producer.shutdown()
    emit(event="done", failures=failures)
    return 0


def simple_consume(args: argparse.Namespace) -> int:
    expression = FilterExpression(
        args.expression, d.FilterType.SQL if args.selector == "sql" else d.FilterType.TAG
    )
    consumer = SimpleConsumer(configuration(args), args.group, {args.topic: expression}, args.await_seconds)
    try:
        consumer.startup()
    except Exception as exc:
        emit(event="start-error", exception=type(exc).__name__, message=str(exc))
        return 1
    acked = polls = 0
    try:
        while acked < args.expect and (args.polls == 0 or polls < args.polls):
            polls += 1
            try:
                messages = consumer.receive(args.batch, args.invisible_seconds)
            except Exception as exc:
                emit(event="receive-error", exception=type(exc).__name__, message=str(exc))
                continue
            for m in messages or []:
                emit(**received("received", m))
                if m.delivery_attempt < args.ack_attempt:
                    if args.change_invisible_seconds:
                        try:
                            consumer.change_invisible_duration(m, args.change_invisible_seconds)
                            emit(event="changed", id=m.message_id, changed_ms=int(time.time() * 1000))
                        except Exception as exc:
                            emit(
                                event="change-error",
                                id=m.message_id,
                                exception=type(exc).__name__,
                                message=str(exc),
                            )
                    emit(event="not-acked", id=m.message_id)
                    continue
                try:
                    consumer.ack(m)
                    acked += 1
                    emit(event="acked", id=m.message_id)
                except Exception as exc:
                    emit(event="ack-error", id=m.message_id, exception=type(exc).__name__, message=str(exc))
    finally:
        consumer.shutdown()
    emit(event="done", acked=acked, polls=polls)
    return 0


class Probe:
    """Raw MessagingService calls as one client: a Telemetry stream carrying the client's settings stays open
    while the unary calls run, as an SDK's does."""

    def __init__(self, endpoint: str, group: str) -> None:
        self.endpoint = endpoint
        self.group = group
        self.client_id = f"probe@{os.getpid()}@{uuid.uuid4().hex[:8]}"
        self.stub = MessagingServiceStub(grpc.insecure_channel(endpoint))
        self.outbox: queue.Queue[s.TelemetryCommand | None] = queue.Queue()

    def metadata(self) -> list[tuple[str, str]]:
        return [
            ("x-mq-client-id", self.client_id),
            ("x-mq-language", "PYTHON"),
            ("x-mq-protocol", "v2"),
            ("x-mq-client-version", "5.1.2"),
            ("x-mq-request-id", str(uuid.uuid4())),
            ("x-mq-date-time", time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())),
        ]

    def endpoints(self) -> d.Endpoints:
        host, port = self.endpoint.rsplit(":", 1)
        return d.Endpoints(scheme=d.AddressScheme.IPv4, addresses=[d.Address(host=host, port=int(port))])

    def telemetry(self, settings: d.Settings) -> d.Settings:
        def commands() -> Iterator[s.TelemetryCommand]:
            while (cmd := self.outbox.get()) is not None:
                yield cmd

        answers = self.stub.Telemetry(commands(), metadata=self.metadata())
        self.outbox.put(s.TelemetryCommand(settings=settings))
        first = next(answers)
        threading.Thread(target=lambda: [None for _ in answers], daemon=True).start()
        answer: d.Settings = first.settings
        return answer

    def close(self) -> None:
        self.outbox.put(None)


def status(resp: Any) -> dict[str, Any]:
    return {"code": d.Code.Name(resp.status.code), "number": resp.status.code, "message": resp.status.message}


def settings_dict(msg: Any) -> dict[str, Any]:
    from google.protobuf.json_format import MessageToDict

    out: dict[str, Any] = MessageToDict(msg, preserving_proto_field_name=True)
    return out


def probe(args: argparse.Namespace) -> int:
    p = Probe(args.endpoint, args.group)
    topic = d.Resource(name=args.topic)
    md = p.metadata

    route = p.stub.QueryRoute(s.QueryRouteRequest(topic=topic, endpoints=p.endpoints()), metadata=md())
    emit(
        event="probe",
        case="query-route",
        **status(route),
        route=[settings_dict(q) for q in route.message_queues],
    )
    unknown = p.stub.QueryRoute(
        s.QueryRouteRequest(topic=d.Resource(name="NoSuchTopic_probe"), endpoints=p.endpoints()),
        metadata=md(),
    )
    emit(event="probe", case="query-route-unknown-topic", **status(unknown))

    settings = d.Settings(
        client_type=d.ClientType.SIMPLE_CONSUMER,
        access_point=p.endpoints(),
        request_timeout={"seconds": 10},
        subscription=d.Subscription(
            group=d.Resource(name=args.group),
            subscriptions=[
                d.SubscriptionEntry(topic=topic, expression=d.FilterExpression(type=d.TAG, expression="*"))
            ],
            long_polling_timeout={"seconds": 3},
        ),
        user_agent=d.UA(language=d.Language.PYTHON, version="5.1.2", platform="linux", hostname="probe"),
    )
    pushed = p.telemetry(settings)
    emit(event="probe", case="telemetry-simple-consumer", settings=settings_dict(pushed))
    producer_settings = d.Settings(
        client_type=d.ClientType.PRODUCER,
        access_point=p.endpoints(),
        request_timeout={"seconds": 10},
        publishing=d.Publishing(topics=[topic]),
        user_agent=d.UA(language=d.Language.PYTHON, version="5.1.2", platform="linux", hostname="probe"),
    )
    producer = Probe(args.endpoint, args.group)
    emit(
        event="probe",
        case="telemetry-producer",
        settings=settings_dict(producer.telemetry(producer_settings)),
    )

    queue_ = route.message_queues[0]
    readable = d.MessageQueue(topic=topic, id=-1, broker=queue_.broker, permission=queue_.permission)

    def receive(
        group: str, mq: d.MessageQueue, invisible_s: int = 10
    ) -> tuple[dict[str, Any], list[d.Message]]:
        req = s.ReceiveMessageRequest(
            group=d.Resource(name=group),
            message_queue=mq,
            filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
            batch_size=32,
            invisible_duration={"seconds": invisible_s},
            auto_renew=False,
            long_polling_timeout={"seconds": 2},
        )
        got: list[d.Message] = []
        st: dict[str, Any] = {}
        for answer in p.stub.ReceiveMessage(req, metadata=md(), timeout=20):
            kind = answer.WhichOneof("content")
            if kind == "status":
                st = status(answer)
            elif kind == "message":
                got.append(answer.message)
        return st, got

    # The topic is empty when the probe starts: the first receive is an empty long poll.
    t0 = time.monotonic()
    st, got = receive(args.group, readable)
    emit(
        event="probe",
        case="receive-empty-long-poll",
        waited_s=round(time.monotonic() - t0, 1),
        count=len(got),
        **st,
    )
    st, got = receive(
        args.group, d.MessageQueue(topic=d.Resource(name="NoSuchTopic_probe"), id=-1, broker=queue_.broker)
    )
    emit(event="probe", case="receive-unknown-topic", count=len(got), **st)
    st, got = receive(f"{args.group}_unknown", readable)
    emit(event="probe", case="receive-unknown-group", count=len(got), **st)

    def send(body: bytes, dest: str, group: str | None = None) -> dict[str, Any]:
        props = d.SystemProperties(
            message_id=uuid.uuid4().hex.upper(),
            body_encoding=d.Encoding.IDENTITY,
            message_type=d.MessageType.FIFO if group else d.MessageType.NORMAL,
            born_timestamp={"seconds": int(time.time())},
            born_host="probe",
        )
        if group:
            props.message_group = group
        resp = p.stub.SendMessage(
            s.SendMessageRequest(
                messages=[d.Message(topic=d.Resource(name=dest), system_properties=props, body=body)]
            ),
            metadata=md(),
        )
        return status(resp) | {"entries": [status_entry(e) for e in resp.entries]}

    emit(event="probe", case="send-ok", **send(b"probe", args.topic))
    emit(event="probe", case="send-unknown-topic", **send(b"x", "NoSuchTopic_probe"))
    emit(event="probe", case="send-body-over-4MiB", **send(b"x" * (4 * 1024 * 1024 + 1), args.topic))
    emit(event="probe", case="send-fifo-to-normal-topic", **send(b"x", args.topic, group="g"))
    emit(event="probe", case="send-normal-to-fifo-topic", **send(b"x", args.fifo_topic))

    def ack(handle: str, message_id: str) -> dict[str, Any]:
        resp = p.stub.AckMessage(
            s.AckMessageRequest(
                group=d.Resource(name=args.group),
                topic=topic,
                entries=[s.AckMessageEntry(message_id=message_id, receipt_handle=handle)],
            ),
            metadata=md(),
        )
        return status(resp) | {"entries": [status_entry(e) for e in resp.entries]}

    def change(handle: str, message_id: str) -> dict[str, Any]:
        resp = p.stub.ChangeInvisibleDuration(
            s.ChangeInvisibleDurationRequest(
                group=d.Resource(name=args.group),
                topic=topic,
                receipt_handle=handle,
                invisible_duration={"seconds": 10},
                message_id=message_id,
            ),
            metadata=md(),
        )
        return status(resp)

    def receive_any() -> tuple[dict[str, Any], list[d.Message]]:
        """Receive from each broker in turn (a send may have gone to either) until a message comes."""
        brokers = {q.broker.name: q.broker for q in route.message_queues}
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for broker in brokers.values():
                st, got = receive(
                    args.group, d.MessageQueue(topic=topic, id=-1, broker=broker), invisible_s=10
                )
                if got:
                    return st, got
        raise AssertionError("no message received within 20 s")

    # A client that never sent its settings (no Telemetry stream): what each call answers it.
    silent = Probe(args.endpoint, args.group)
    heartbeat = silent.stub.Heartbeat(
        s.HeartbeatRequest(group=d.Resource(name=args.group), client_type=d.ClientType.SIMPLE_CONSUMER),
        metadata=silent.metadata(),
    )
    emit(event="probe", case="heartbeat-without-settings", **status(heartbeat))
    silent_receive = s.ReceiveMessageRequest(
        group=d.Resource(name=args.group),
        # the FIFO topic: empty (its sends were refused), so this receive leases nothing the probe needs
        message_queue=d.MessageQueue(topic=d.Resource(name=args.fifo_topic), id=-1, broker=queue_.broker),
        filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
        batch_size=1,
        invisible_duration={"seconds": 10},
        long_polling_timeout={"seconds": 5},
    )
    frames = [
        status(r)
        for r in silent.stub.ReceiveMessage(silent_receive, metadata=silent.metadata(), timeout=20)
        if r.WhichOneof("content") == "status"
    ]
    emit(event="probe", case="receive-without-settings", **(frames[0] if frames else {"code": "NONE"}))

    emit(event="probe", case="ack-forged-receipt-handle", **ack("not-a-receipt-handle", "0" * 34))
    emit(
        event="probe",
        case="change-invisible-forged-receipt-handle",
        **change("not-a-receipt-handle", "0" * 34),
    )
    st, messages = receive_any()
    emit(event="probe", case="receive-one", **st, count=len(messages))
    first = messages[0]
    handle, mid = first.system_properties.receipt_handle, first.system_properties.message_id
    emit(event="probe", case="ack-ok", **ack(handle, mid))
    emit(event="probe", case="ack-twice", **ack(handle, mid))
    for m in messages[1:]:
        ack(m.system_properties.receipt_handle, m.system_properties.message_id)
    send(b"probe-expire", args.topic)
    st, messages = receive_any()
    handle, mid = messages[0].system_properties.receipt_handle, messages[0].system_properties.message_id
    time.sleep(11)  # past its invisible time: the handle has expired
    emit(event="probe", case="ack-expired-receipt-handle", **ack(handle, mid))
    emit(event="probe", case="change-invisible-expired-receipt-handle", **change(handle, mid))
    p.close()
    producer.close()
    return 0


def status_entry(entry: Any) -> dict[str, Any]:
    return {
        "code": d.Code.Name(entry.status.code),
        "number": entry.status.code,
        "message": entry.status.message,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=("produce", "simple-consume", "probe"))
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--fifo-topic", default="")
    parser.add_argument("--group", default="")
    parser.add_argument("--type", default="normal", choices=("normal", "fifo", "delay", "transaction"))
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--body-prefix", default="m")
    parser.add_argument("--tag", default="")
    parser.add_argument("--groups", type=int, default=1)
    parser.add_argument("--delay-ms", type=int, default=0)
    parser.add_argument("--resolution", default="commit", choices=("commit", "rollback", "none"))
    parser.add_argument("--check", default="commit", choices=("commit", "rollback"))
    parser.add_argument("--linger", type=float, default=60)
    parser.add_argument("--expect-checks", type=int, default=0)  # the Java peer's; one check ends the linger
    parser.add_argument("--expect", type=int, default=1)
    parser.add_argument("--polls", type=int, default=0)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--ack-attempt", type=int, default=1)
    parser.add_argument("--invisible-seconds", type=int, default=30)
    parser.add_argument("--change-invisible-seconds", type=int, default=0)
    parser.add_argument("--await-seconds", type=int, default=5)
    parser.add_argument("--selector", default="tag", choices=("tag", "sql"))
    parser.add_argument("--expression", default="*")
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("--home", default="")
    args = parser.parse_args()
    watchdog = threading.Timer(args.timeout, lambda: (emit(event="timeout"), os._exit(2)))
    watchdog.daemon = True
    watchdog.start()
    rc = {"produce": produce, "simple-consume": simple_consume, "probe": probe}[args.command](args)
    sys.stdout.flush()
    os._exit(rc)  # the SDK's threads can outlive shutdown(); the answer is out


if __name__ == "__main__":
    main()
