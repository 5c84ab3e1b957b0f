"""The gRPC front-end's client registry (tidemq/grpc/clients.py): producers found under their topics while
a Telemetry stream is open, forgotten on termination or when the stream ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from tidemq.grpc.clients import GrpcClients, telemetry_stream
from tidemq.grpc.proto import definition_pb2 as pb
from tidemq.grpc.proto import service_pb2 as spb

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
