"""Replies waiting for their requests (Java RequestFutureHolder): the client instance hands every reply a
broker pushes with PUSH_REPLY_MESSAGE_TO_CLIENT to the request with the same correlation id
(docs/protocols/rocketmq-request-reply.md)."""

from __future__ import annotations

import asyncio
import logging
import time
import zlib

from tidemq.record import MessageExt, Prop, SysFlag, decompress_body, pack_host
from tidemq.remoting.codes import ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.headers import ReplyMessageRequestHeader

log = logging.getLogger(__name__)


class ReplyWaiters:
    """The requests of one client instance still waiting for a reply, by correlation id."""

    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Future[MessageExt]] = {}

    def expect(self, correlation_id: str) -> asyncio.Future[MessageExt]:
        future: asyncio.Future[MessageExt] = asyncio.get_running_loop().create_future()
        self._waiting[correlation_id] = future
        return future

    def forget(self, correlation_id: str) -> None:
        """Stop waiting (answered, timed out or failed): a reply arriving later is dropped."""
        self._waiting.pop(correlation_id, None)

    def __len__(self) -> int:
        return len(self._waiting)

    def receive(self, req: RemotingCommand) -> RemotingCommand:
        """Answer a pushed reply: SUCCESS once it is read, matched or not (a late reply is no error to
        the broker, as with Java), SYSTEM_ERROR when it cannot be read."""
        try:
            reply = reply_message(req)
        except (ValueError, zlib.error) as exc:  # a bad header field, body or address
            log.warning("a pushed reply could not be read: %s", exc)
            return req.error(ResponseCode.SYSTEM_ERROR, "process reply message fail")
        correlation_id = reply.properties.get(Prop.CORRELATION_ID, "")
        future = self._waiting.pop(correlation_id, None)
        if future is None or future.done():
            log.debug(
                "reply with correlation id %s from %s matches no waiting request (late or not ours): dropped",
                correlation_id,
                reply.born_host,
            )
        else:
            future.set_result(reply)
        return req.response()


def reply_message(req: RemotingCommand) -> MessageExt:
    """The reply a PUSH_REPLY_MESSAGE_TO_CLIENT carries, body decompressed, stamped with its arrival time."""
    h = ReplyMessageRequestHeader.from_ext(req.ext_fields)
    body = bytes(req.body)
    if h.sys_flag & SysFlag.COMPRESSED:
        body = decompress_body(body)
    msg = MessageExt(
        topic=h.topic,
        body=body,
        queue_id=h.queue_id,
        flag=h.flag,
        sys_flag=h.sys_flag,
        born_timestamp=h.born_timestamp,
        store_timestamp=h.store_timestamp,
        born_host_raw=_packed(h.born_host),
        store_host_raw=_packed(h.store_host),
        reconsume_times=h.reconsume_times or 0,
        props=h.properties or "",
    )
    msg.put_property(Prop.REPLY_MESSAGE_ARRIVE_TIME, str(int(time.time() * 1000)))
    return msg


def _packed(address: str) -> bytes:
    """``host:port`` (Java writes ``/host:port``) in stored layout; empty when it is not an IP address."""
    host, _, port = address.lstrip("/").rpartition(":")
    try:
        return pack_host(host.strip("[]"), int(port))[0]
    except ValueError:
        return b""
