"""Broker processors driven without a socket: a broker on a temp-dir store, a stand-in client connection,
and one call that awaits a processor's answer when it is deferred."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

from tidemq.broker.broker import Broker
from tidemq.broker.config import BrokerConfig
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.transport import RemotingConnection
from tidemq.store import StoreConfig


@contextlib.asynccontextmanager
async def broker_on(folder: Path) -> AsyncIterator[Broker]:
    """A broker whose store is open, never listening and registered with no name server."""
    broker = Broker(BrokerConfig(port=0), StoreConfig(folder))
    await broker.store.start()
    try:
        yield broker
    finally:
        await broker.store.close()


class Peer:
    """What the processors use of a client connection: its address, per-connection attributes and oneway
    requests to the client (recorded)."""

    def __init__(self) -> None:
        self.peer = ("127.0.0.1", 40000)
        self.attrs: dict[str, Any] = {}
        self.is_closed = False
        self.told: list[RemotingCommand] = []

    def invoke_oneway(self, command: RemotingCommand) -> None:
        self.told.append(command)


async def call(
    processor: Any, broker: Broker, req: RemotingCommand, conn: Peer | None = None
) -> RemotingCommand:
    result = processor(broker, cast(RemotingConnection, conn or Peer()), req)
    if inspect.isawaitable(result):
        result = await result
    assert isinstance(result, RemotingCommand)
    return result
