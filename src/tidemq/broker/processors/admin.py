"""Admin and query commands: topics, groups, stats, message lookup, forwarding to consumers
(docs/protocols/rocketmq-remoting.md#admin-commands)."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import orjson

from tidemq.broker.metadata import SubscriptionGroupConfig, TopicConfig
from tidemq.broker.processors import after_registration, register_table
from tidemq.broker.topic_attributes import MESSAGE_TYPE, MIXED, AttributeProblem, apply_changes, parse_changes
from tidemq.broker.topics import is_system_topic, name_problem
from tidemq.record import MessageDecodeError, decode_offset_msg_id
from tidemq.remoting import jsonx
from tidemq.remoting.bodies import body_shape, json_object, required_text
from tidemq.remoting.codes import LanguageCode, RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.headers import (
    ConsumerGroupRequestHeader,
    CreateTopicRequestHeader,
    GetConsumeStatsRequestHeader,
    QueryMessageRequestHeader,
    TopicRequestHeader,
    ViewMessageRequestHeader,
)
from tidemq.remoting.names import AUTO_CREATE_TOPIC_KEY, retry_topic
from tidemq.remoting.transport import RemotingConnection, RemotingError, RequestDispatcher

if TYPE_CHECKING:
    from tidemq.broker.broker import Broker

log = logging.getLogger(__name__)
Result = RemotingCommand | Awaitable[RemotingCommand]
MAX_UNIQ_QUERY = 32


def register(dispatcher: RequestDispatcher, broker: Broker) -> None:
    register_table(
        dispatcher,
        broker,
        {
            RequestCode.UPDATE_AND_CREATE_TOPIC: create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: all_topic_config,
            RequestCode.GET_TOPIC_STATS_INFO: topic_stats,
            RequestCode.GET_CONSUME_STATS: consume_stats,
            RequestCode.GET_BROKER_RUNTIME_INFO: runtime_info,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: consumer_connections,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: topic_consumed_by,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: create_group,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: all_groups,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: delete_group,
            RequestCode.GET_ALL_CONSUMER_OFFSET: all_consumer_offsets,
            RequestCode.VIEW_MESSAGE_BY_ID: view_message,
            RequestCode.QUERY_MESSAGE: query_message,
            RequestCode.GET_CONSUMER_RUNNING_INFO: forward_to_consumer,
            RequestCode.CONSUME_MESSAGE_DIRECTLY: forward_to_consumer,
        },
    )


def _mq_key(broker: Broker, topic: str, queue_id: int) -> jsonx.ObjectKey:
    return jsonx.object_key(brokerName=broker.config.broker_name, queueId=queue_id, topic=topic)


def create_topic(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    h = CreateTopicRequestHeader.from_ext(req.ext_fields)
    problem = name_problem(h.topic)
    if problem:
        return req.error(ResponseCode.SYSTEM_ERROR, problem)
    if is_system_topic(h.topic) or (h.topic == h.default_topic and h.topic != AUTO_CREATE_TOPIC_KEY):
        return req.error(ResponseCode.SYSTEM_ERROR, f"The topic[{h.topic}] is conflict with system topic.")
    if not 0 < h.read_queue_nums <= 1024 or not 0 < h.write_queue_nums <= 1024:
        return req.error(
            ResponseCode.SYSTEM_ERROR, "readQueueNums and writeQueueNums must be between 1 and 1024"
        )
    existing = broker.topics.get(h.topic)
    try:  # 5.x attributes (``+message.type=FIFO``): an update without the field keeps the topic's
        attributes = apply_changes(
            dict(existing.attributes) if existing is not None else None,
            parse_changes(req.ext_fields.get("attributes")),
        )
    except AttributeProblem as exc:
        log.info("topic %s not created: %s", h.topic, exc)
        return req.error(ResponseCode.SYSTEM_ERROR, str(exc))
    if attributes.get(MESSAGE_TYPE) == MIXED:
        return req.error(ResponseCode.SYSTEM_ERROR, "MIXED message type is not supported.")
    broker.topics.create_or_update(
        TopicConfig(
            h.topic,
            h.read_queue_nums,
            h.write_queue_nums,
            h.perm,
            h.topic_filter_type,
            h.topic_sys_flag or 0,
            h.order,
            attributes=attributes,
        )
    )
    return after_registration(broker, req.response())


def delete_topic(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    topic = TopicRequestHeader.from_ext(req.ext_fields).topic
    if is_system_topic(topic):
        return req.error(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
    broker.topics.delete(topic)
    broker.store.delete_topic(topic)
    broker.pulled.forget_topic(topic)
    return req.response()


def all_topic_config(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    return req.response(body=orjson.dumps(broker.topic_config_wrapper()))


def topic_stats(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    topic = TopicRequestHeader.from_ext(req.ext_fields).topic
    config = broker.topics.get(topic)
    if config is None:
        return req.error(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
    table: dict[Any, Any] = {}
    store = broker.store
    for queue_id in range(config.write_queue_nums):
        hi = store.max_offset(topic, queue_id)
        table[_mq_key(broker, topic, queue_id)] = {
            "minOffset": store.min_offset(topic, queue_id),
            "maxOffset": hi,
            "lastUpdateTimestamp": max(0, store.store_timestamp_at(topic, queue_id, hi - 1)) if hi else 0,
        }
    return req.response(body=jsonx.dumps_object_keys({"offsetTable": table}))


def consume_stats(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    h = GetConsumeStatsRequestHeader.from_ext(req.ext_fields)
    offsets = broker.consumer_offsets
    suffix = "@" + h.consumer_group
    popped = broker.pop.topics_of(h.consumer_group)
    topics = (
        [h.topic]
        if h.topic
        else sorted({k[: -len(suffix)] for k in offsets.table if k.endswith(suffix)} | set(popped))
    )
    table: dict[Any, Any] = {}
    tps = 0.0
    for topic in topics:
        config = broker.topics.get(topic)
        if config is None:
            continue
        tps += broker.pulled.tps(topic, h.consumer_group)
        for queue_id in range(config.write_queue_nums):
            committed = offsets.get(f"{topic}@{h.consumer_group}", queue_id)
            if committed is None:
                # A popping (gRPC) group's progress: its acks advance the pop state's committed offset,
                # as a 5.x broker's pop acks advance the group's consumer offset.
                committed = max(0, broker.pop.committed_offset(h.consumer_group, topic, queue_id))
            last = broker.store.store_timestamp_at(topic, queue_id, committed - 1) if committed > 0 else 0
            table[_mq_key(broker, topic, queue_id)] = {
                "brokerOffset": broker.store.max_offset(topic, queue_id),
                "consumerOffset": committed,
                "lastTimestamp": max(0, last),
            }
    return req.response(body=jsonx.dumps_object_keys({"consumeTps": tps, "offsetTable": table}))


def runtime_info(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    return req.response(body=orjson.dumps({"table": broker.runtime_info()}))


def consumer_connections(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    """The group's remoting connections and its clients on the other front-ends (a 5.x SDK over gRPC
    shows as the proxy registers it: CLUSTERING, CONSUME_FROM_LAST_OFFSET, its SDK's language)."""
    group = ConsumerGroupRequestHeader.from_ext(req.ext_fields).consumer_group
    info = broker.clients.consumers.get(group)
    others = list(broker.clients.front_end_consumers.get(group, {}).values())
    if (info is None or not info.channels) and not others:
        return req.error(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
    connections = [
        _connection(ch.client_id, c.address, ch.language, ch.version)
        for c, ch in (info.channels.items() if info else ())
    ] + [_connection(o.client_id, o.address, o.language, o.version) for o in others]
    subscriptions = {sub.topic: sub.to_json() for o in others for sub in o.subscriptions}
    if info is not None:
        subscriptions |= {topic: sub.to_json() for topic, sub in info.subscriptions.items()}
    return req.response(
        body=orjson.dumps(
            {
                "connectionSet": connections,
                "subscriptionTable": subscriptions,
                "consumeType": info.consume_type if info else others[0].consume_type,
                "messageModel": info.message_model if info else "CLUSTERING",
                "consumeFromWhere": info.consume_from_where if info else "CONSUME_FROM_LAST_OFFSET",
            }
        )
    )


def _connection(client_id: str, address: str, language: int, version: int) -> dict[str, Any]:
    known = language in LanguageCode._value2member_map_
    return {
        "clientId": client_id,
        "clientAddr": address,
        "language": LanguageCode(language).name if known else "OTHER",
        "version": version,
    }


def topic_consumed_by(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    """The groups of a topic, online (subscribed now) or not (holding offsets on it), as Java answers:
    ``mqadmin queryMsgById`` builds a message's track from them."""
    topic = TopicRequestHeader.from_ext(req.ext_fields).topic
    groups = {group for group, info in broker.clients.consumers.items() if topic in info.subscriptions}
    groups |= {
        group
        for group, members in broker.clients.front_end_consumers.items()
        if any(sub.topic == topic for client in members.values() for sub in client.subscriptions)
    }
    groups |= broker.pop.groups_of(topic)
    prefix = topic + "@"
    groups |= {key[len(prefix) :] for key in broker.consumer_offsets.table if key.startswith(prefix)}
    return req.response(body=orjson.dumps({"groupList": sorted(groups)}))


def create_group(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    data = json_object(req.body, "SubscriptionGroupConfig")
    required_text(data, "groupName", "SubscriptionGroupConfig")
    with body_shape("SubscriptionGroupConfig"):
        config = SubscriptionGroupConfig.from_json(data)
    problem = name_problem(config.group_name, "group")
    if problem:
        return req.error(ResponseCode.SYSTEM_ERROR, problem)
    broker.groups.put(config)
    return req.response()


def all_groups(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    groups = broker.groups.groups
    return req.response(
        body=orjson.dumps(
            {
                "subscriptionGroupTable": {name: cfg.to_json() for name, cfg in groups.items()},
                "dataVersion": broker.topics.table.data_version.to_json(),
            }
        )
    )


def delete_group(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    group = req.ext_fields.get("groupName", "")
    if not group:
        return req.error(ResponseCode.SYSTEM_ERROR, "missing required field 'groupName'")
    broker.groups.remove(group)
    broker.consumer_offsets.remove_where(lambda key: key.endswith("@" + group))
    broker.topics.delete(retry_topic(group))
    return req.response()


def all_consumer_offsets(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    return req.response(body=orjson.dumps(broker.consumer_offsets.snapshot()))


def view_message(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    offset = ViewMessageRequestHeader.from_ext(req.ext_fields).offset
    data = broker.store.read_message(offset)
    if data is None:
        return req.error(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
    return req.response(body=data)


def query_message(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    h = QueryMessageRequestHeader.from_ext(req.ext_fields)
    max_num = h.max_num
    if req.ext_fields.get("_UNIQUE_KEY_QUERY", "false") == "true":
        max_num = min(max_num, MAX_UNIQ_QUERY)
    found = broker.store.query_by_key(h.topic, h.key, max(1, max_num), h.begin_timestamp, h.end_timestamp)
    if not found:
        return req.error(
            ResponseCode.QUERY_NOT_FOUND, f"can not find message, maybe time range not correct, key {h.key}"
        )
    now = int(time.time() * 1000)
    ext = {
        "indexLastUpdateTimestamp": str(now),
        "indexLastUpdatePhyoffset": str(broker.store.commitlog.max_offset),
    }
    return req.response(ext_fields=ext, body=b"".join(found))


async def forward_to_consumer(
    broker: Broker, conn: RemotingConnection, req: RemotingCommand
) -> RemotingCommand:
    """GET_CONSUMER_RUNNING_INFO / CONSUME_MESSAGE_DIRECTLY: ask the consumer over its own connection."""
    group = req.ext_fields.get("consumerGroup", "")
    client_id = req.ext_fields.get("clientId", "")
    target = broker.clients.find_consumer(group, client_id)
    if target is None:
        return req.error(ResponseCode.SYSTEM_ERROR, f"The Consumer <{client_id}> not online")
    ext = dict(req.ext_fields)
    body = req.body
    if req.code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
        try:
            _, offset = decode_offset_msg_id(ext.get("msgId", ""))
        except MessageDecodeError as exc:
            return req.error(ResponseCode.SYSTEM_ERROR, str(exc))
        data = broker.store.read_message(offset)
        if data is None:
            return req.error(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
        ext["brokerName"] = broker.config.broker_name
        body = data
    try:
        answer = await target.invoke(RemotingCommand(req.code, ext_fields=ext, body=body), timeout=10.0)
    except RemotingError as exc:
        return req.error(ResponseCode.CONSUME_MSG_TIMEOUT, f"consumer <{client_id}> did not answer: {exc}")
    return req.response(answer.code, answer.remark, answer.ext_fields, answer.body)
