"""The 5.x clients this endpoint knows, by client id (Java proxy's ClientActivity and its managers).

A 5.x SDK has no producer group: the proxy registers a producer under each topic it publishes to, which
is the group its half messages carry (PGROUP), so a transaction check for a half message finds the
producers of its topic here. A client with an open Telemetry stream can be told things (the check);
it is forgotten on NotifyClientTermination or when its stream ends.

Every client with settings is also registered in the broker's client registry (``register_front_end_*``),
as the proxy registers it with its broker: a consumer under its group (a SimpleConsumer CONSUME_ACTIVELY, a
PushConsumer CONSUME_PASSIVELY), a producer under each topic it publishes to, with the address, language
(``x-mq-language``) and version it connected with, so ``mqadmin consumerConnection`` and ``tidemq group``
show it; a consumer's group gets its retry topic, as a broker's heartbeat gives it, which is where
RocketMQ's admin tools look a group's broker up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import grpc

from tidemq.broker.clients import FrontEndClient, SubscriptionData
from tidemq.filter import SQL92, SqlParseError
from tidemq.grpc.proto import definition_pb2 as pb
from tidemq.grpc.proto import service_pb2 as spb
from tidemq.remoting.names import retry_topic

if TYPE_CHECKING:
    from tidemq.broker.broker import Broker

log = logging.getLogger(__name__)

#: The proxy's answer to a version string that names no MQVersion (the SDKs send "5.1.2"): its own.
CURRENT_VERSION = 409
#: ``x-mq-language`` values (apache.rocketmq.v2.Language names) to Java's LanguageCode numbers.
LANGUAGES = {
    "JAVA": 0,
    "CPP": 1,
    "DOTNET": 2,
    "DOT_NET": 2,
    "PYTHON": 3,
    "RUBY": 6,
    "GO": 9,
    "GOLANG": 9,
    "PHP": 10,
    "RUST": 12,
}
LANGUAGE_OTHER = 7


@dataclass(frozen=True, slots=True)
class Peer:
    """Where a client connected from and what it says it is, as a registry entry shows it."""

    address: str = ""
    language: int = LANGUAGE_OTHER
    version: int = CURRENT_VERSION


def peer_of(context: grpc.aio.ServicerContext[object, object]) -> Peer:
    """The ``ipv4:host:port`` peer and the ``x-mq-language`` header of a call."""
    _, _, address = (context.peer() or "").partition(":")
    language = ""
    for key, value in context.invocation_metadata() or ():
        if key == "x-mq-language" and isinstance(value, str):
            language = value.upper()
    return Peer(address.replace("[", "").replace("]", ""), LANGUAGES.get(language, LANGUAGE_OTHER))


def subscription_data(entry: pb.SubscriptionEntry) -> SubscriptionData:
    """A 5.x subscription as the broker's registry keeps one (FilterAPI.build)."""
    expression = entry.expression
    kind = SQL92 if expression.type == pb.SQL else "TAG"
    try:
        return SubscriptionData.from_expression(entry.topic.name, expression.expression, 0, kind)
    except SqlParseError:
        return SubscriptionData(entry.topic.name, expression.expression, expression_type=kind)


@dataclass(slots=True)
class GrpcClient:
    client_id: str
    settings: pb.Settings | None = None
    peer: Peer = Peer()
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

    def __init__(self, broker: Broker | None = None) -> None:
        self.clients: dict[str, GrpcClient] = {}
        self.broker = broker

    def identify(self, client_id: str, peer: Peer) -> None:
        """Where a client's Telemetry stream comes from (before its settings arrive on it)."""
        self.clients.setdefault(client_id, GrpcClient(client_id)).peer = peer

    def settings(self, client_id: str, settings: pb.Settings) -> None:
        client = self.clients.setdefault(client_id, GrpcClient(client_id))
        client.settings = settings
        self._register(client)

    def _register(self, client: GrpcClient) -> None:
        """(Re-)register the client in the broker's registry from its latest settings."""
        if self.broker is None or client.settings is None:
            return
        registry = self.broker.clients
        registry.unregister_front_end(client.client_id)
        peer = client.peer
        for topic in client.producer_groups:
            registry.register_front_end_producer(
                topic, FrontEndClient(client.client_id, peer.address, peer.language, peer.version)
            )
        group = client.consumer_group
        if group is None:
            return
        consume_type = "CONSUME_ACTIVELY" if client.settings.client_type == pb.SIMPLE_CONSUMER else None
        subscriptions = [subscription_data(e) for e in client.settings.subscription.subscriptions]
        registry.register_front_end_consumer(
            group,
            FrontEndClient(
                client.client_id,
                peer.address,
                peer.language,
                peer.version,
                consume_type or "CONSUME_PASSIVELY",
                subscriptions,
            ),
        )
        config = self.broker.groups.get(group)
        self.broker.topics.ensure(retry_topic(group), config.retry_queue_nums if config else 1)

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
        if self.broker is not None:
            self.broker.clients.unregister_front_end(client_id)
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
