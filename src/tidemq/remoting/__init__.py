"""RocketMQ 4.x remoting: sans-IO codecs first, then the asyncio transport on top of them."""

from tidemq.remoting.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from tidemq.remoting.command import RemotingCommand

__all__ = ["LanguageCode", "RemotingCommand", "RequestCode", "ResponseCode", "SerializeType"]
