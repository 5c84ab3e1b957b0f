"""Request processors: one small function per request code, registered on the broker's dispatcher.

Each module owns a family of codes (send, pull, consumer management, admin); the handlers read the
request's typed header, call the broker and the store, and build the response. They import ``broker``,
``remoting``, ``store`` and the record layout; nothing imports them but ``broker.broker``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.transport import ProcessorResult, RemotingConnection, RequestDispatcher

if TYPE_CHECKING:
    from tidemq.broker.broker import Broker

BrokerProcessor = Callable[["Broker", RemotingConnection, RemotingCommand], ProcessorResult]


def register_all(dispatcher: RequestDispatcher, broker: Broker) -> None:
    from tidemq.broker.processors import admin, consumer, pull, reply, reset_offset, send, transaction

    for module in (send, pull, consumer, admin, transaction, reply, reset_offset):
        module.register(dispatcher, broker)


def register_table(
    dispatcher: RequestDispatcher, broker: Broker, table: Mapping[int, BrokerProcessor]
) -> None:
    for code, processor in table.items():
        dispatcher.register(code, functools.partial(processor, broker))


async def after_registration(broker: Broker, response: RemotingCommand) -> RemotingCommand:
    """Answer once the name servers know of a topic just created: the client looks its route up next."""
    await broker.topics_registered()
    return response
