"""Consumers of a RocketMQ consumer group, built by composition.

``ConsumerCore`` (core.py) is what every consumer holds: the group's registration with the client
instance, the offset store (offset_store.py: the broker for clustering, a local file for broadcasting),
rebalance (rebalance.py: allocation, one process queue per owned queue) and the pull loops (pulling.py,
process_queue.py). On top of it, ``PushConsumer`` (push.py) adds a consume service (concurrently.py,
orderly.py) calling a listener, and ``LitePullConsumer`` (lite_pull.py) a buffer read by ``poll``.

This package imports only the rest of ``tidemq.client`` (the instance, the wire calls in api, config,
allocation, routes, the retry producer), ``tidemq.remoting`` and ``tidemq.aio``; never ``tidemq.broker``,
``tidemq.store`` or ``tidemq.namesrv``.
"""

from tidemq.client.consumer.push import PushConsumer
from tidemq.client.consumer.types import (
    ConsumeContext,
    ConsumeFromWhere,
    ConsumeStatus,
    MessageModel,
    MessageSelector,
)

__all__ = [
    "ConsumeContext",
    "ConsumeFromWhere",
    "ConsumeStatus",
    "MessageModel",
    "MessageSelector",
    "PushConsumer",
]
