"""Request processors: one small function per request code, registered on the broker's dispatcher."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidemq.remoting.transport import RequestDispatcher

if TYPE_CHECKING:
    from tidemq.broker.broker import Broker


def register_all(dispatcher: RequestDispatcher, broker: Broker) -> None:
    from tidemq.broker.processors import admin, consumer, pull, send

    for module in (send, pull, consumer, admin):
        module.register(dispatcher, broker)
