"""RocketMQ clients. They speak only the wire protocol, so they work against any 4.x broker.

asyncio API: ``Producer``, ``PushConsumer``, ``LitePullConsumer``; the same with ``Blocking`` in front for
code that does not use asyncio.

Owns the client instance (connections, route polling, heartbeats), the producer, the consumers
(``consumer/``), queue allocation and admin calls (docs/protocols/rocketmq-consumption.md). May import
``remoting``, the record layout, ``aio`` and ``address``; never ``broker``, ``store`` or ``namesrv``.
"""

from tidemq.client.api import BrokerError
from tidemq.client.blocking import (
    BlockingLitePullConsumer,
    BlockingProducer,
    BlockingPushConsumer,
    BlockingTransactionProducer,
)
from tidemq.client.consumer import (
    ConsumeContext,
    ConsumeFromWhere,
    ConsumeStatus,
    MessageModel,
    MessageSelector,
    PushConsumer,
)
from tidemq.client.consumer.lite_pull import LitePullConsumer
from tidemq.client.instance import MQClientError
from tidemq.client.message import Message, SendResult, SendStatus
from tidemq.client.message_queue import MessageQueue
from tidemq.client.producer import Producer
from tidemq.client.request import RequestTimeoutError, create_reply
from tidemq.client.transaction import LocalTransactionState, TransactionProducer, TransactionSendResult

__all__ = [
    "BlockingLitePullConsumer",
    "BlockingProducer",
    "BlockingPushConsumer",
    "BlockingTransactionProducer",
    "BrokerError",
    "ConsumeContext",
    "ConsumeFromWhere",
    "ConsumeStatus",
    "LitePullConsumer",
    "LocalTransactionState",
    "MQClientError",
    "Message",
    "MessageModel",
    "MessageQueue",
    "MessageSelector",
    "Producer",
    "PushConsumer",
    "RequestTimeoutError",
    "SendResult",
    "SendStatus",
    "TransactionProducer",
    "TransactionSendResult",
    "create_reply",
]
