"""The 5.x clients this endpoint knows, by client id (Java proxy's ClientActivity and its managers).

A 5.x SDK has no producer group: the proxy registers a producer under each topic it publishes to, which
is the group its half messages carry (PGROUP), so a transaction check for a half message finds the
producers of its topic here. A client with an open Telemetry stream can be told things (the check);
it is forgotten on NotifyClientTermination or when its stream ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from tidemq.grpc.proto import definition_pb2 as pb
from tidemq.grpc.proto import service_pb2 as spb

log = logging.getLogger(__name__)


@dataclass(slots=True)
class GrpcClient:
    client_id: str
    settings: pb.Settings | None = None
    #: Each open Telemetry stream's commands waiting to go down it (None ends the stream).
    outboxes: list[asyncio.Queue[spb.TelemetryCommand | None]] = field(default_factory=list)

    @property
    def producer_groups(self) -> list[str]:
        """The topics a producer publishes to: its groups, as the proxy registers them."""
        if self.settings is None or self.settings.client_type != pb.PRODUCER:
            return []
        return [topic.name for topic in self.settings.publishing.topics]

    @property
    def consumer_group(self) -> str | None:
        s = self.settings
        if s is None or s.client_type not in (pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER):
            return None
        return s.subscription.group.name or None


class GrpcClients:
    """Every known client; what a transaction check and the admin views ask."""

    def __init__(self) -> None:
        self.clients: dict[str, GrpcClient] = {}

    def settings(self, client_id: str, settings: pb.Settings) -> None:
        client = self.clients.setdefault(client_id, GrpcClient(client_id))
        client.settings = settings

    def open_stream(self, client_id: str) -> asyncio.Queue[spb.TelemetryCommand | None]:
        """A Telemetry stream opened: what the server pushes to the client goes through the queue."""
        client = self.clients.setdefault(client_id, GrpcClient(client_id))
        outbox: asyncio.Queue[spb.TelemetryCommand | None] = asyncio.Queue()
        client.outboxes.append(outbox)
        return outbox

    def close_stream(self, client_id: str, outbox: asyncio.Queue[spb.TelemetryCommand | None]) -> None:
        """A stream ended; with no stream left the client is gone (it opens a new one when it returns)."""
        client = self.clients.get(client_id)
        if client is None:
            return
        if outbox in client.outboxes:
            client.outboxes.remove(outbox)
        if not client.outboxes:
            self.drop(client_id)

    def drop(self, client_id: str) -> None:
        if self.clients.pop(client_id, None) is not None:
            log.info("grpc client %s is gone", client_id)

    def producers(self, group: str) -> list[GrpcClient]:
        return [c for c in self.clients.values() if group in c.producer_groups]

    def consumers(self, group: str) -> list[GrpcClient]:
        return [c for c in self.clients.values() if c.consumer_group == group]

    def push_to_producer(self, group: str, command: spb.TelemetryCommand) -> str | None:
        """Send ``command`` to one producer of ``group`` with an open stream, picked at random (Java's
        getAvailableChannel); its client id, or None when there is none."""
        live = [c for c in self.producers(group) if c.outboxes]
        if not live:
            return None
        client = random.choice(live)
        client.outboxes[-1].put_nowait(command)
        return client.client_id


async def telemetry_stream(
    clients: GrpcClients,
    client_id: str,
    requests: AsyncIterator[spb.TelemetryCommand],
    answer: Callable[[spb.TelemetryCommand], spb.TelemetryCommand | None],
) -> AsyncIterator[spb.TelemetryCommand]:
    """One Telemetry stream: the answers to what the client sends, and what the server pushes to it
    meanwhile, in one ordered output; the client is registered while the stream is open."""
    outbox = clients.open_stream(client_id)

    async def read() -> None:
        try:
            async for command in requests:
                reply = answer(command)
                if reply is not None:
                    outbox.put_nowait(reply)
        finally:
            outbox.put_nowait(None)

    reader = asyncio.create_task(read())
    try:
        while (command := await outbox.get()) is not None:
            yield command
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader
        clients.close_stream(client_id, outbox)
