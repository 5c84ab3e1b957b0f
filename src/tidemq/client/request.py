"""Request-reply (Java DefaultMQProducer.request): a request is an ordinary message carrying a correlation
id, the requester's client id and a time to live; whoever consumes it answers with ``create_reply`` and a
send, and the broker pushes that reply back to the waiting requester
(docs/protocols/rocketmq-request-reply.md)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from typing import TYPE_CHECKING

from tidemq.client.config import wrap_namespace
from tidemq.client.instance import MQClientError
from tidemq.client.message import Message
from tidemq.record import MessageExt, Prop
from tidemq.remoting.names import REPLY_MESSAGE_FLAG, reply_topic

if TYPE_CHECKING:
    from tidemq.client.producer import Producer


class RequestTimeoutError(MQClientError):
    """A request was sent but no reply came back within its timeout."""

    def __init__(self, topic: str, correlation_id: str, timeout: float) -> None:
        super().__init__(
            f"request to {topic!r} was sent, but no reply with correlation id {correlation_id} "
            f"came back within {timeout:g} s"
        )
        self.correlation_id = correlation_id
        self.timeout = timeout


def create_reply(request: MessageExt, body: bytes) -> Message:
    """The reply to a consumed request (Java MessageUtil.createReplyMessage): addressed to the reply topic
    of the cluster that stored the request, with the request's correlation id, requester and TTL.
    A producer's ``send`` of it goes out as SEND_REPLY_MESSAGE_V2."""
    props = request.properties
    cluster = props.get(Prop.CLUSTER)
    if not cluster:
        msg_id = props.get(Prop.UNIQ_KEY) or request.offset_msg_id
        raise MQClientError(
            f"cannot reply to message {msg_id}: property[{Prop.CLUSTER}] is null "
            "(it is not a request read from a broker)"
        )
    reply_props = {Prop.MSG_TYPE: REPLY_MESSAGE_FLAG}
    for key in (Prop.CORRELATION_ID, Prop.REPLY_TO_CLIENT, Prop.TTL):
        if props.get(key):
            reply_props[key] = props[key]
    return Message(reply_topic(cluster), body, properties=reply_props)


def is_reply(props: dict[str, str]) -> bool:
    return props.get(Prop.MSG_TYPE) == REPLY_MESSAGE_FLAG


async def request(producer: Producer, msg: Message, timeout: float) -> MessageExt:
    """Send ``msg`` as a request and wait for its reply; ``timeout`` (seconds) covers both."""
    if timeout <= 0:
        raise MQClientError(f"request timeout must be positive, got {timeout:g} s")
    instance = producer.instance
    correlation_id = str(uuid.uuid4())
    props = dict(msg.properties)
    props[Prop.CORRELATION_ID] = correlation_id
    props[Prop.REPLY_TO_CLIENT] = instance.client_id
    props[Prop.TTL] = str(int(timeout * 1000))
    request_msg = dataclasses.replace(msg, properties=props)
    deadline = time.monotonic() + timeout
    reply = instance.replies.expect(correlation_id)
    try:
        topic = wrap_namespace(producer.config.namespace, msg.topic)
        if topic not in instance.routes or not producer.announced_for_requests:
            # The broker pushes the reply on a producer connection it learnt from a heartbeat: make sure
            # every broker of the route has had one before anybody can answer (as Java does).
            await producer.queues_for(topic)
            await instance.heartbeat_all()
            producer.announced_for_requests = True
        await producer.send(request_msg, timeout=max(deadline - time.monotonic(), 0.001))
        try:
            async with asyncio.timeout(deadline - time.monotonic()):
                return await reply
        except TimeoutError:
            raise RequestTimeoutError(msg.topic, correlation_id, timeout) from None
    finally:
        instance.replies.forget(correlation_id)
