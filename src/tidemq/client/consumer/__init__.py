"""Consumers: the push consumer (long-polling pulls, rebalance, process queues) and the lite pull consumer."""

from tidemq.client.consumer.push import PushConsumer
from tidemq.client.consumer.types import ConsumeContext, ConsumeFromWhere, ConsumeStatus, MessageModel

__all__ = ["ConsumeContext", "ConsumeFromWhere", "ConsumeStatus", "MessageModel", "PushConsumer"]
