"""The gRPC front-end's client registry (tidemq/grpc/clients.py): producers found under their topics while
a Telemetry stream is open, forgotten on termination or when the stream ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

from tidemq.broker.clients import ClientManager
from tidemq.grpc.clients import LANGUAGES, GrpcClients, Peer, telemetry_stream
from tidemq.grpc.proto import definition_pb2 as pb
from tidemq.grpc.proto import service_pb2 as spb

if TYPE_CHECKING:
    from tidemq.broker.broker import Broker

PRODUCER = pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="Orders")]))
CHECK = spb.TelemetryCommand(recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand())


def test_push_reaches_only_a_producer_of_the_topic_with_an_open_stream() -> None:
    clients = GrpcClients()
    clients.settings("p1", PRODUCER)
    assert clients.push_to_producer("Orders", CHECK) is None  # settings but no stream
    outbox = clients.open_stream("p1")
    assert clients.push_to_producer("Payments", CHECK) is None
    assert clients.push_to_producer("Orders", CHECK) == "p1" and outbox.get_nowait() == CHECK
    clients.drop("p1")  # NotifyClientTermination
    assert clients.push_to_producer("Orders", CHECK) is None and not clients.producers("Orders")


async def test_stream_answers_pushes_and_unregisters_when_it_ends() -> None:
    clients = GrpcClients()
    hang_up = asyncio.Event()

    async def requests() -> AsyncIterator[spb.TelemetryCommand]:
        yield spb.TelemetryCommand(settings=PRODUCER)
        await hang_up.wait()

    def answer(command: spb.TelemetryCommand) -> spb.TelemetryCommand:
        clients.settings("p1", command.settings)
        return spb.TelemetryCommand(status=pb.Status(code=pb.OK))

    stream = telemetry_stream(clients, "p1", requests(), answer)
    first = await anext(stream)
    assert first.status.code == pb.OK
    assert clients.push_to_producer("Orders", CHECK) == "p1"
    assert await anext(stream) == CHECK
    hang_up.set()
    assert [c async for c in stream] == []
    assert "p1" not in clients.clients


class _Topics:
    def __init__(self) -> None:
        self.ensured: list[tuple[str, int]] = []

    def ensure(self, topic: str, queue_nums: int) -> None:
        self.ensured.append((topic, queue_nums))


class _Groups:
    def get(self, group: str) -> None:
        return None


def test_clients_are_registered_in_the_brokers_registry_as_the_proxy_does() -> None:
    registry = ClientManager()
    topics = _Topics()
    broker = SimpleNamespace(clients=registry, topics=topics, groups=_Groups())
    clients = GrpcClients(cast("Broker", broker))
    clients.identify("c1", Peer("127.0.0.1:5000", LANGUAGES["PYTHON"]))
    sql = pb.FilterExpression(type=pb.SQL, expression="a > 1")
    entry = pb.SubscriptionEntry(topic=pb.Resource(name="Orders"), expression=sql)
    simple = pb.Subscription(group=pb.Resource(name="G"), subscriptions=[entry])
    clients.settings("c1", pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=simple))
    clients.settings("c2", pb.Settings(client_type=pb.PUSH_CONSUMER, subscription=simple))
    clients.settings("p1", PRODUCER)
    members = registry.front_end_consumers["G"]
    assert (members["c1"].address, members["c1"].language) == ("127.0.0.1:5000", 3)
    assert (
        members["c1"].consume_type == "CONSUME_ACTIVELY" and members["c2"].consume_type == "CONSUME_PASSIVELY"
    )
    (sub,) = members["c1"].subscriptions
    assert (sub.topic, sub.expression_type, sub.sub_string) == ("Orders", "SQL92", "a > 1")
    assert members["c2"].language == 7  # no x-mq-language seen: OTHER
    assert list(registry.front_end_producers["Orders"]) == ["p1"]
    assert ("%RETRY%G", 1) in topics.ensured
    clients.drop("c1")
    clients.drop("p1")
    assert list(registry.front_end_consumers["G"]) == ["c2"] and not registry.front_end_producers
