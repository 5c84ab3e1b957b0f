"""RocketMQ 4.x remoting: the frame and header codecs (sans-IO), request and response codes, typed
command headers, fastjson-tolerant JSON, route wire types, then the asyncio transport on top of them
(docs/protocols/rocketmq-remoting.md).

Shared by the name server, the broker and the clients, so it imports none of them: only ``aio``,
``address`` and the record layout. Codecs do no I/O; only ``transport`` touches sockets.
"""

from tidemq.remoting.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from tidemq.remoting.command import RemotingCommand

__all__ = ["LanguageCode", "RemotingCommand", "RequestCode", "ResponseCode", "SerializeType"]
