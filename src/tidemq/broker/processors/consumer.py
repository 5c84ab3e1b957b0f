"""Client management and consumer commands: heartbeats, offsets, consumer lists, locks
(docs/protocols/rocketmq-remoting.md#client-management-commands,
docs/protocols/rocketmq-consumption.md#offset-commands)."""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING

import orjson

from tidemq.broker.clients import ClientChannel, SubscriptionData
from tidemq.broker.processors import after_registration, register_table
from tidemq.broker.processors.send import subscription_group
from tidemq.broker.topics import name_problem
from tidemq.filter import SQL92, TAG, SqlParseError, compile_sql
from tidemq.remoting.bodies import body_shape, json_object, object_field, objects, required_text, text
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.headers import (
    ConsumerGroupRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueueRequestHeader,
    SearchOffsetRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from tidemq.remoting.names import retry_topic
from tidemq.remoting.transport import RemotingConnection, RequestDispatcher

if TYPE_CHECKING:
    from tidemq.broker.broker import Broker

Result = RemotingCommand | Awaitable[RemotingCommand]


def register(dispatcher: RequestDispatcher, broker: Broker) -> None:
    register_table(
        dispatcher,
        broker,
        {
            RequestCode.HEART_BEAT: heart_beat,
            RequestCode.UNREGISTER_CLIENT: unregister_client,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: consumer_list,
            RequestCode.QUERY_CONSUMER_OFFSET: query_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: update_offset,
            RequestCode.GET_MAX_OFFSET: max_offset,
            RequestCode.GET_MIN_OFFSET: min_offset,
            RequestCode.GET_EARLIEST_MSG_STORETIME: earliest_store_time,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: search_offset,
            RequestCode.LOCK_BATCH_MQ: lock_batch,
            RequestCode.UNLOCK_BATCH_MQ: unlock_batch,
            RequestCode.CHECK_CLIENT_CONFIG: check_client_config,
        },
    )


def heart_beat(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    data = json_object(req.body, "HeartbeatData")
    client_id = text(data, "clientID", "HeartbeatData")
    if not client_id:
        return req.error(ResponseCode.SYSTEM_ERROR, "heartbeat without clientID")
    consumers = objects(data, "consumerDataSet", "HeartbeatData")
    producers = objects(data, "producerDataSet", "HeartbeatData")
    channel = ClientChannel(client_id, req.language, req.version, time.monotonic())
    topics_before = broker.topics.table.data_version.counter
    for consumer in consumers:
        group = text(consumer, "groupName", "ConsumerData")
        problem = name_problem(group, "group")
        if problem:
            return req.error(ResponseCode.SYSTEM_ERROR, problem)
        config = subscription_group(broker, group)
        if config is None:
            return req.error(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}"
            )
        broker.clients.notify_enabled[group] = config.notify_consumer_ids_changed_enable
        model = text(consumer, "messageModel", "ConsumerData") or "CLUSTERING"
        if model == "CLUSTERING":
            broker.topics.ensure(retry_topic(group), config.retry_queue_nums)
        with body_shape("SubscriptionData"):
            try:  # inside: a bad SQL92 expression is the protocol's parse failure, not a bad body
                subs = [
                    SubscriptionData.from_json(s)
                    for s in objects(consumer, "subscriptionDataSet", "ConsumerData")
                ]
            except SqlParseError as e:
                return req.error(
                    ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"parse the subscription failed: {e}"
                )
        changed = broker.clients.register_consumer(
            group,
            conn,
            channel,
            text(consumer, "consumeType", "ConsumerData") or "CONSUME_PASSIVELY",
            model,
            text(consumer, "consumeFromWhere", "ConsumerData") or "CONSUME_FROM_LAST_OFFSET",
            subs,
        )
        if changed:
            broker.clients.notify_ids_changed(group)
    for producer in producers:
        broker.clients.register_producer(text(producer, "groupName", "ProducerData"), conn, channel)
    response = req.response()
    if broker.topics.table.data_version.counter != topics_before:
        # A retry topic was just created: consumers look its route up right after this answer.
        return after_registration(broker, response)
    return response


def unregister_client(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    h = UnregisterClientRequestHeader.from_ext(req.ext_fields)
    if h.producer_group:
        broker.clients.unregister_producer(h.producer_group, conn)
    if h.consumer_group and broker.clients.unregister_consumer(h.consumer_group, conn):
        broker.clients.notify_ids_changed(h.consumer_group)
    return req.response()


def consumer_list(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    group = ConsumerGroupRequestHeader.from_ext(req.ext_fields).consumer_group
    ids = broker.clients.consumer_ids(group)
    if not ids:
        return req.error(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
    return req.response(body=orjson.dumps({"consumerIdList": ids}))


def query_offset(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    h = QueryConsumerOffsetRequestHeader.from_ext(req.ext_fields)
    offset = broker.consumer_offsets.get(f"{h.topic}@{h.consumer_group}", h.queue_id)
    # A young queue, whose first message is still in memory (Java's checkInDiskByConsumeOffset): Java
    # answers 0, so a new group reads it from its start even from LAST_OFFSET
    # (docs/protocols/rocketmq-consumption.md#broker-offsets).
    if (
        offset is None
        and broker.store.min_offset(h.topic, h.queue_id) <= 0
        and not broker.store.in_disk(h.topic, h.queue_id, 0, broker.memory_for_messages)
    ):
        offset = 0
    if offset is None:
        return req.error(
            ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
        )
    return req.response(ext_fields={"offset": str(offset)})


def update_offset(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    h = UpdateConsumerOffsetRequestHeader.from_ext(req.ext_fields)
    if h.commit_offset >= 0:  # ali-ons commits -1 for queues it has no offset for
        broker.consumer_offsets.set(f"{h.topic}@{h.consumer_group}", h.queue_id, h.commit_offset)
    return req.response()


def max_offset(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    h = QueueRequestHeader.from_ext(req.ext_fields)
    return req.response(ext_fields={"offset": str(broker.store.max_offset(h.topic, h.queue_id))})


def min_offset(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    h = QueueRequestHeader.from_ext(req.ext_fields)
    return req.response(ext_fields={"offset": str(broker.store.min_offset(h.topic, h.queue_id))})


def earliest_store_time(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    h = QueueRequestHeader.from_ext(req.ext_fields)
    ts = broker.store.store_timestamp_at(h.topic, h.queue_id, broker.store.min_offset(h.topic, h.queue_id))
    return req.response(ext_fields={"timestamp": str(ts)})


def search_offset(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    h = SearchOffsetRequestHeader.from_ext(req.ext_fields)
    offset = broker.store.search_offset_by_timestamp(h.topic, h.queue_id, h.timestamp)
    return req.response(ext_fields={"offset": str(offset)})


def _lock_body(req: RemotingCommand, what: str) -> tuple[str, str, list[tuple[str, str, int]]]:
    """(group, client id, queues) of a LockBatchRequestBody / UnlockBatchRequestBody."""
    data = json_object(req.body, what)
    group = required_text(data, "consumerGroup", what)
    client_id = required_text(data, "clientId", what)
    with body_shape(what):
        queues = [
            (str(mq["topic"]), str(mq["brokerName"]), int(mq["queueId"]))
            for mq in objects(data, "mqSet", what)
        ]
    return group, client_id, queues


def lock_batch(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    group, client_id, queues = _lock_body(req, "LockBatchRequestBody")
    held = broker.locks.try_lock_batch(group, queues, client_id)
    body = {"lockOKMQSet": [{"topic": t, "brokerName": b, "queueId": q} for t, b, q in held]}
    return req.response(body=orjson.dumps(body))


def unlock_batch(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    group, client_id, queues = _lock_body(req, "UnlockBatchRequestBody")
    broker.locks.unlock_batch(group, queues, client_id)
    return req.response()


def check_client_config(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    data = json_object(req.body, "CheckClientRequestBody")
    sub = object_field(data, "subscriptionData", "CheckClientRequestBody")
    expression_type = text(sub, "expressionType", "SubscriptionData") or TAG
    if expression_type == TAG:
        return req.response()
    if expression_type != SQL92:
        return req.error(
            ResponseCode.SYSTEM_ERROR,
            f"The broker does not support consumer to filter message by {expression_type}",
        )
    try:
        compile_sql(text(sub, "subString", "SubscriptionData"))
    except SqlParseError as e:
        return req.error(ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"parse the subscription failed: {e}")
    return req.response()
