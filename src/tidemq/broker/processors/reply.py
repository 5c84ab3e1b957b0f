"""SEND_REPLY_MESSAGE / SEND_REPLY_MESSAGE_V2: a consumer's reply to a request, pushed straight to the
requesting client with PUSH_REPLY_MESSAGE_TO_CLIENT (docs/protocols/rocketmq-request-reply.md).

The reply travels on the connection the requester heartbeats its producer group on, so the requester needs
no subscription to the reply topic; the broker also keeps the reply in ``<cluster>_REPLY_TOPIC`` unless
``store_reply_message`` is off, as Java's storeReplyMessageEnable does.
"""

from __future__ import annotations

import logging
import random
import time
from typing import TYPE_CHECKING

from tidemq.broker.processors import register_table
from tidemq.broker.processors.send import _born_host, _resolve_topic
from tidemq.record import MessageDecodeError, Prop, decode_properties, encode_properties, offset_msg_ids
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.headers import ReplyMessageRequestHeader, SendMessageRequestHeader
from tidemq.remoting.transport import RemotingConnection, RemotingError, RequestDispatcher
from tidemq.store import StoreError

if TYPE_CHECKING:
    from tidemq.broker.broker import Broker

log = logging.getLogger(__name__)

#: How long the broker waits for the requester to take a pushed reply (Java Broker2Client.callClient).
PUSH_REPLY_TIMEOUT_S = 10.0


def register(dispatcher: RequestDispatcher, broker: Broker) -> None:
    register_table(
        dispatcher,
        broker,
        {
            RequestCode.SEND_REPLY_MESSAGE: send_reply_message,
            RequestCode.SEND_REPLY_MESSAGE_V2: send_reply_message,
        },
    )


async def send_reply_message(
    broker: Broker, conn: RemotingConnection, req: RemotingCommand
) -> RemotingCommand:
    """Push the reply to the client named by its REPLY_TO_CLIENT, then store it. The sender hears SUCCESS
    only when the requester took it; a reply whose requester is gone is still stored, and the sender
    gets SYSTEM_ERROR naming the client (as Java answers)."""
    h = SendMessageRequestHeader.from_ext(
        req.ext_fields, compact=req.code == RequestCode.SEND_REPLY_MESSAGE_V2
    )
    resolved = _resolve_topic(broker, req, h)
    if isinstance(resolved, RemotingCommand):
        return resolved
    if len(req.body) > broker.config.max_message_size:
        return req.error(
            ResponseCode.MESSAGE_ILLEGAL,
            f"message body size {len(req.body)} exceeds the maximum {broker.config.max_message_size}",
        )
    queue_id = h.queue_id if h.queue_id >= 0 else random.randrange(resolved.write_queue_nums)
    props = decode_properties(h.properties)
    problem = await _push_reply(broker, conn, req, h, props)
    ext = {
        "msgId": "0",
        "queueId": str(queue_id),
        "queueOffset": "0",
        "MSG_REGION": broker.config.region,
        "TRACE_ON": "true" if broker.config.trace_on else "false",
    }
    if broker.config.store_reply_message:
        _store_reply(broker, conn, req, h, queue_id, props, ext)
    if problem is not None:
        log.warning("%s", problem)
        return req.error(ResponseCode.SYSTEM_ERROR, problem)
    return req.response(ext_fields=ext)


async def _push_reply(
    broker: Broker,
    conn: RemotingConnection,
    req: RemotingCommand,
    h: SendMessageRequestHeader,
    props: dict[str, str],
) -> str | None:
    """Hand the reply to its requester; None when it took it, else why not."""
    client_id = props.get(Prop.REPLY_TO_CLIENT)
    if not client_id:
        return f"reply message properties[{Prop.REPLY_TO_CLIENT}] is null"
    target = broker.clients.find_producer(client_id)
    if target is None:
        return f"push reply message fail, channel of <{client_id}> not found."
    props[Prop.PUSH_REPLY_TIME] = str(int(time.time() * 1000))
    header = ReplyMessageRequestHeader(
        producer_group=h.producer_group,
        topic=h.topic,
        default_topic=h.default_topic,
        default_topic_queue_nums=h.default_topic_queue_nums,
        queue_id=h.queue_id,
        sys_flag=h.sys_flag,
        born_timestamp=h.born_timestamp,
        flag=h.flag,
        born_host=f"{conn.peer[0]}:{conn.peer[1]}",
        store_host=broker.config.advertised_addr,
        store_timestamp=int(time.time() * 1000),
        properties=encode_properties(props),
        reconsume_times=h.reconsume_times,
        unit_mode=h.unit_mode,
    )
    push = RemotingCommand(
        RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, ext_fields=header.to_ext(), body=req.body
    )
    try:
        answer = await target.invoke(push, PUSH_REPLY_TIMEOUT_S)
    except RemotingError as exc:
        log.warning("push of a reply to <%s> failed: %s", client_id, exc)
        return f"push reply message to {client_id}fail."
    if answer.code != ResponseCode.SUCCESS:
        log.warning("client <%s> refused a pushed reply: %s", client_id, answer.remark)
        return f"push reply message to {client_id}fail."
    return None


def _store_reply(
    broker: Broker,
    conn: RemotingConnection,
    req: RemotingCommand,
    h: SendMessageRequestHeader,
    queue_id: int,
    props: dict[str, str],
    ext: dict[str, str],
) -> None:
    """Keep the reply in its topic; a failure is logged, never the sender's error (the push decides)."""
    try:
        append = broker.make_append(
            topic=h.topic,
            queue_id=queue_id,
            body=bytes(req.body),
            flag=h.flag,
            properties=dict(props),
            sys_flag=h.sys_flag,
            born_timestamp=h.born_timestamp,
            born_host=_born_host(conn),
            reconsume_times=h.reconsume_times or 0,
            schedule=False,
        )
        result = broker.store.put([append])
    except (MessageDecodeError, StoreError) as exc:
        log.warning("reply to %s not stored: %s", h.topic, exc)
        return
    broker.stats["put"] += 1
    ext["msgId"] = offset_msg_ids(broker.store_host, result.commit_log_offsets)
    ext["queueOffset"] = str(result.queue_offsets[0])
