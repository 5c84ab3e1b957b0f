"""RocketMQ 4.x remoting: sans-IO codecs first, then the asyncio transport on top of them
(docs/protocols/rocketmq-remoting.md).

It owns the envelope a message travels in: frames, request and response headers, codes, commands, JSON
bodies, route data, RocketMQ's reserved names and the transport. The messages themselves (stored records,
a producer's batch body, properties, ids) are ``tidemq.record``'s: remoting carries them as opaque bodies.

Shared by the name server, the broker and the clients, so it imports none of them: only ``aio``,
``address`` and the record layout. Codecs do no I/O; only ``transport`` touches sockets.
"""

from tidemq.remoting.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from tidemq.remoting.command import RemotingCommand

__all__ = ["LanguageCode", "RemotingCommand", "RequestCode", "ResponseCode", "SerializeType"]
