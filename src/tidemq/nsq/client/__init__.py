"""tidemq's NSQ client: an asyncio ``Consumer`` that behaves like go-nsq v1.1, a ``Producer``, and blocking
facades. It speaks only the wire protocol, so it works against a real nsqd as well as tidemq's.

Imports only the shared NSQ codec at ``tidemq.nsq`` level (protocol, compression, http); never
``nsq/nsqd/``, ``nsq/lookupd/`` or ``store/``.
"""

from tidemq.nsq.client.blocking import BlockingConsumer, BlockingProducer
from tidemq.nsq.client.config import Config, parse_duration
from tidemq.nsq.client.consumer import Consumer, ConsumerStats
from tidemq.nsq.client.errors import (
    AlreadyConnectedError,
    AuthError,
    ConfigError,
    NotConnectedError,
    NSQClientError,
    ProtocolError,
    StoppedError,
)
from tidemq.nsq.client.lookup import LookupdError
from tidemq.nsq.client.message import Message
from tidemq.nsq.client.negotiation import IdentifyResponse
from tidemq.nsq.client.producer import Producer

__all__ = [
    "AlreadyConnectedError",
    "AuthError",
    "BlockingConsumer",
    "BlockingProducer",
    "Config",
    "ConfigError",
    "Consumer",
    "ConsumerStats",
    "IdentifyResponse",
    "LookupdError",
    "Message",
    "NSQClientError",
    "NotConnectedError",
    "Producer",
    "ProtocolError",
    "StoppedError",
    "parse_duration",
]
