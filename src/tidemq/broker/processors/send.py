"""SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE and CONSUMER_SEND_MSG_BACK
(docs/protocols/rocketmq-remoting.md#send-commands, docs/protocols/rocketmq-messages.md#send-path,
docs/protocols/rocketmq-consumption.md#retry-and-dead-letter)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from tidemq.broker import batch_steps
from tidemq.broker.metadata import SubscriptionGroupConfig, TopicConfig
from tidemq.broker.processors import register_table
from tidemq.broker.timers import MESSAGES_QUEUE, TIMER_PROPERTIES, TimerPlan, TimerRejected
from tidemq.broker.topics import NOT_SENDABLE, name_problem
from tidemq.histogram import timed
from tidemq.record import (
    LOOPBACK_HOST,
    MessageDecodeError,
    Prop,
    StoredBatch,
    SysFlag,
    build_stored_batch,
    decode_properties,
    decode_record,
    encode_properties,
    offset_msg_ids,
    pack_host,
)
from tidemq.remoting.codes import VERSION_V3_4_9, RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.headers import ConsumerSendMsgBackRequestHeader, SendMessageRequestHeader
from tidemq.remoting.names import RETRY_PREFIX, TIMER_TOPIC, dlq_topic, retry_topic
from tidemq.remoting.route import PERM_READ, PERM_WRITE
from tidemq.remoting.transport import RemotingConnection, RequestDispatcher
from tidemq.store import FlushMode, StoreError
from tidemq.store.batch_append import MIN_STEPPED_MESSAGES
from tidemq.store.requests import PutResult

if TYPE_CHECKING:
    from tidemq.broker.broker import Broker


def register(dispatcher: RequestDispatcher, broker: Broker) -> None:
    timed_send = timed(broker.send_latency, send_message)
    register_table(
        dispatcher,
        broker,
        {
            RequestCode.SEND_MESSAGE: timed_send,
            RequestCode.SEND_MESSAGE_V2: timed_send,
            RequestCode.SEND_BATCH_MESSAGE: timed_send,
            RequestCode.CONSUMER_SEND_MSG_BACK: consumer_send_back,
        },
    )


def subscription_group(broker: Broker, group: str) -> SubscriptionGroupConfig | None:
    """Find a group's config, auto-creating it as Java does by default."""
    config = broker.groups.get(group)
    if config is None and broker.config.auto_create_subscription_group:
        config = SubscriptionGroupConfig(group)
        broker.groups.put(config)
    return config


def _born_host(conn: RemotingConnection) -> bytes:
    """The sender's address in stored layout, worked out once per connection."""
    packed: bytes | None = conn.attrs.get("born_host")
    if packed is None:
        try:
            packed = pack_host(conn.peer[0], conn.peer[1])[0]
        except ValueError:
            packed = LOOPBACK_HOST
        conn.attrs["born_host"] = packed
    return packed


def _resolve_topic(
    broker: Broker, req: RemotingCommand, h: SendMessageRequestHeader
) -> TopicConfig | RemotingCommand:
    if not broker.config.writable:
        return req.error(
            ResponseCode.NO_PERMISSION,
            f"the broker[{broker.config.broker_name}] sending message is forbidden",
        )
    problem = name_problem(h.topic)
    if problem:
        return req.error(ResponseCode.SYSTEM_ERROR, problem)
    if h.topic in NOT_SENDABLE:
        return req.error(ResponseCode.SYSTEM_ERROR, f"Sending message to topic[{h.topic}] is forbidden.")
    config = broker.topics.get(h.topic)
    if config is None:
        if h.topic.startswith(RETRY_PREFIX):
            config = broker.topics.ensure(h.topic, 1)
        else:
            config = broker.topics.create_in_send(h.topic, h.default_topic, h.default_topic_queue_nums, 0)
    if config is None:
        return req.error(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!")
    if not config.writable:
        return req.error(ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] sending message is forbidden")
    if h.queue_id >= max(config.read_queue_nums, config.write_queue_nums):
        return req.error(
            ResponseCode.SYSTEM_ERROR,
            f"request queueId[{h.queue_id}] is illegal, {config} Producer: {req.ext_fields.get('a', '')}",
        )
    return config


def send_message(
    broker: Broker, conn: RemotingConnection, req: RemotingCommand
) -> RemotingCommand | Awaitable[RemotingCommand]:
    if req.code == RequestCode.SEND_MESSAGE:
        h = SendMessageRequestHeader.from_ext(req.ext_fields)
    else:  # SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE: the compact a..n header
        h = SendMessageRequestHeader.from_compact_ext(req.ext_fields)
    resolved = _resolve_topic(broker, req, h)
    if isinstance(resolved, RemotingCommand):
        return resolved
    config = resolved
    if len(req.body) > broker.config.max_message_size:
        return req.error(
            ResponseCode.MESSAGE_ILLEGAL,
            f"message body size {len(req.body)} exceeds the maximum {broker.config.max_message_size}",
        )
    queue_id = h.queue_id if h.queue_id >= 0 else random.randrange(config.write_queue_nums)
    topic = h.topic
    props = decode_properties(h.properties)
    transactional = props.get(Prop.TRAN_MSG) == "true"
    if SysFlag.transaction_value(h.sys_flag) == SysFlag.TRANSACTION_PREPARED and not transactional:
        return req.error(
            ResponseCode.MESSAGE_ILLEGAL,
            "a prepared transaction message must carry the property TRAN_MSG=true",
        )
    reconsume = h.reconsume_times or 0
    if topic.startswith(RETRY_PREFIX):
        group = subscription_group(broker, topic[len(RETRY_PREFIX) :])
        if group is None:
            return req.error(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {topic}"
            )
        max_times = group.retry_max_times
        if req.version >= VERSION_V3_4_9 and h.max_reconsume_times is not None:
            max_times = h.max_reconsume_times
        if reconsume >= max_times:
            topic = dlq_topic(topic[len(RETRY_PREFIX) :])
            broker.topics.ensure(topic, 1, PERM_READ | PERM_WRITE)
            queue_id = 0
            props.pop(Prop.DELAY, None)
    born_host = _born_host(conn)
    if h.batch or req.code == RequestCode.SEND_BATCH_MESSAGE:
        return _send_batch(broker, req, h, topic, queue_id, props, born_host)
    timer: TimerPlan | None = None
    if not transactional:
        try:
            timer = broker.timers.plan(props, topic)
        except TimerRejected as exc:
            return req.error(ResponseCode.MESSAGE_ILLEGAL, str(exc))
        if timer is not None:
            props[Prop.REAL_TOPIC], props[Prop.REAL_QID] = topic, str(queue_id)
            topic, queue_id = TIMER_TOPIC, MESSAGES_QUEUE
    if props.get(Prop.DELAY, "0") in ("", "0"):
        # A 4.9 broker stores a plain send without WAIT, and keeps it on a delayed one (it rewrites
        # a delayed message's properties from the parsed table, WAIT included).
        props.pop(Prop.WAIT, None)
    try:
        request = broker.make_append(
            topic=topic,
            queue_id=queue_id,
            body=bytes(req.body),
            flag=h.flag,
            properties=props,
            sys_flag=h.sys_flag,
            born_timestamp=h.born_timestamp,
            born_host=born_host,
            reconsume_times=reconsume,
            schedule=not transactional,
        )
        if timer is not None:
            request.tags_code = timer.due_ms
        if transactional:
            half = broker.transactions.half_append(request)
    except MessageDecodeError as exc:
        return req.error(ResponseCode.MESSAGE_ILLEGAL, str(exc))
    answer_qid = int(props[Prop.REAL_QID]) if timer is not None else queue_id
    if transactional:
        return _store(
            broker,
            req,
            lambda: broker.transactions.put_half(half),
            lambda r: _send_response(broker, req, r, queue_id),
        )
    return _store(
        broker, req, lambda: broker.store.put([request]), lambda r: _send_response(broker, req, r, answer_qid)
    )


def _send_batch(
    broker: Broker,
    req: RemotingCommand,
    h: SendMessageRequestHeader,
    topic: str,
    queue_id: int,
    batch_props: dict[str, str],
    born_host: bytes,
) -> RemotingCommand | Awaitable[RemotingCommand]:
    """Store a batch's messages back to back in one queue (Java's MessageExtBatch path)."""
    if topic.startswith(RETRY_PREFIX):
        return req.error(ResponseCode.MESSAGE_ILLEGAL, "batch messages cannot be sent to a retry topic")
    if batch_props.get(Prop.DELAY, "0") not in ("", "0"):
        return req.error(ResponseCode.MESSAGE_ILLEGAL, "batch messages cannot carry a delay level")
    timer_keys = [k for k in TIMER_PROPERTIES if k in batch_props]
    if timer_keys:
        # A Java broker runs its timer transform on the batch as a whole and stores it broken; refuse instead.
        return req.error(
            ResponseCode.MESSAGE_ILLEGAL,
            f"batch messages cannot be timer messages ({', '.join(timer_keys)}): send them one by one",
        )
    batch_props[Prop.CLUSTER] = broker.config.cluster_name
    body = bytes(req.body)
    fields: dict[str, Any] = {
        "topic": topic,
        "queue_id": queue_id,
        "sys_flag": h.sys_flag,
        "born_timestamp": h.born_timestamp,
        "born_host": born_host,
        "store_timestamp": int(time.time() * 1000),
        "store_host": broker.store_host,
        "extra_properties": encode_properties(batch_props),
        "max_body": broker.config.max_message_size,
    }
    if len(body) > batch_steps.STEP_BODY_BYTES:
        return _send_big_batch(broker, req, body, fields)
    try:
        batch = build_stored_batch(body, **fields)
    except MessageDecodeError as exc:
        return req.error(ResponseCode.MESSAGE_ILLEGAL, str(exc))
    return _store_batch(broker, req, batch, topic, queue_id)


async def _send_big_batch(
    broker: Broker, req: RemotingCommand, body: bytes, fields: dict[str, Any]
) -> RemotingCommand:
    """A big batch: encoded in steps that let the loop run others, then stored (its records in one write,
    and, for one of many messages, its queue and index entries in steps: store/batch_append.py)."""
    try:
        batch = await batch_steps.build_in_steps(body, **fields)
    except MessageDecodeError as exc:
        return req.error(ResponseCode.MESSAGE_ILLEGAL, str(exc))
    if not batch.sizes:
        return req.error(ResponseCode.MESSAGE_ILLEGAL, "batch body holds no message")
    queue_id = fields["queue_id"]
    try:
        if len(batch.sizes) > MIN_STEPPED_MESSAGES:
            result = await broker.store.put_batch_in_steps(fields["topic"], queue_id, batch)
        else:
            result = broker.store.put_batch(fields["topic"], queue_id, batch)
    except StoreError as exc:
        return req.error(ResponseCode.SERVICE_NOT_AVAILABLE, f"service not available now: {exc}")
    broker.stats["put"] += len(result.commit_log_offsets)
    msg_ids = await batch_steps.offset_ids_in_steps(broker.store_host, result.commit_log_offsets)
    response = _send_response(broker, req, result, queue_id, msg_ids)
    if broker.store.config.flush_mode is FlushMode.SYNC:
        answer = after_flush(broker, response, result.end_offset)
        return answer if isinstance(answer, RemotingCommand) else await answer
    return response


def _store_batch(
    broker: Broker, req: RemotingCommand, batch: StoredBatch, topic: str, queue_id: int
) -> RemotingCommand | Awaitable[RemotingCommand]:
    if not batch.sizes:
        return req.error(ResponseCode.MESSAGE_ILLEGAL, "batch body holds no message")
    return _store(
        broker,
        req,
        lambda: broker.store.put_batch(topic, queue_id, batch),
        lambda r: _send_response(broker, req, r, queue_id),
    )


def _store(
    broker: Broker,
    req: RemotingCommand,
    put: Callable[[], PutResult],
    answer: Callable[[PutResult], RemotingCommand],
) -> RemotingCommand | Awaitable[RemotingCommand]:
    """Append, then answer at once (async flush) or once the append is fsynced (sync flush)."""
    try:
        result = put()
    except StoreError as exc:
        return req.error(ResponseCode.SERVICE_NOT_AVAILABLE, f"service not available now: {exc}")
    broker.stats["put"] += len(result.commit_log_offsets)
    response = answer(result)
    if broker.store.config.flush_mode is FlushMode.SYNC:
        return after_flush(broker, response, result.end_offset)
    return response


def after_flush(
    broker: Broker, response: RemotingCommand, end_offset: int
) -> RemotingCommand | asyncio.Future[RemotingCommand]:
    """The answer to a store write under sync flush: sent once an fsync covers it, or FLUSH_DISK_TIMEOUT.
    A future the store's flusher resolves, not a task: one per message sent."""
    if broker.store.is_durable(end_offset):
        return response
    answer: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()

    def settle(failure: StoreError | None) -> None:
        if failure is not None:
            response.code = ResponseCode.FLUSH_DISK_TIMEOUT
        if not answer.done():
            answer.set_result(response)

    broker.store.on_durable(end_offset, settle)
    return answer


def _send_response(
    broker: Broker, req: RemotingCommand, result: PutResult, queue_id: int, msg_ids: str | None = None
) -> RemotingCommand:
    return req.response(
        ext_fields={
            "msgId": msg_ids
            if msg_ids is not None
            else offset_msg_ids(broker.store_host, result.commit_log_offsets),
            "queueId": str(queue_id),
            "queueOffset": str(result.queue_offsets[0]),
            "MSG_REGION": broker.config.region,
            "TRACE_ON": "true" if broker.config.trace_on else "false",
        }
    )


def consumer_send_back(
    broker: Broker, conn: RemotingConnection, req: RemotingCommand
) -> RemotingCommand | Awaitable[RemotingCommand]:
    """Return a failed message for redelivery through %RETRY%<group>, or dead-letter it
    (docs/protocols/rocketmq-consumption.md#retry-and-dead-letter)."""
    h = ConsumerSendMsgBackRequestHeader.from_ext(req.ext_fields)
    group = subscription_group(broker, h.group)
    if group is None:
        return req.error(
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {h.group}"
        )
    if not broker.config.writable:
        return req.error(
            ResponseCode.NO_PERMISSION,
            f"the broker[{broker.config.broker_name}] sending message is forbidden",
        )
    if group.retry_queue_nums <= 0:
        return req.response()
    data = broker.store.read_message(h.offset)
    if data is None:
        return req.error(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {h.offset}")
    msg = decode_record(data, decompress=False)
    props = dict(msg.properties)
    props.setdefault(Prop.RETRY_TOPIC, msg.topic)
    # As a Java broker stores them: WAIT=false, the retry's DELAY level (0 on the way to the dead-letter
    # queue) and the first stored copy's offset message id as ORIGIN_MESSAGE_ID.
    props[Prop.WAIT] = "false"
    props.setdefault(Prop.ORIGIN_MESSAGE_ID, msg.offset_msg_id)
    max_times = group.retry_max_times
    if req.version >= VERSION_V3_4_9 and h.max_reconsume_times is not None:
        max_times = h.max_reconsume_times
    if msg.reconsume_times >= max_times or h.delay_level < 0:
        topic = dlq_topic(h.group)
        broker.topics.ensure(topic, 1, PERM_READ | PERM_WRITE)
        queue_id = 0
        props[Prop.DELAY] = "0"
    else:
        topic = retry_topic(h.group)
        config = broker.topics.ensure(topic, group.retry_queue_nums)
        queue_id = random.randrange(config.write_queue_nums)
        level = h.delay_level or 3 + msg.reconsume_times
        props[Prop.DELAY] = str(level)
    request = broker.make_append_again(
        msg, topic=topic, queue_id=queue_id, properties=props, reconsume_times=msg.reconsume_times + 1
    )
    return _store(broker, req, lambda: broker.store.put([request]), lambda _: req.response())
