"""PULL_MESSAGE with tag or SQL92 filtering and long polling
(docs/protocols/rocketmq-consumption.md#pull-request, docs/protocols/rocketmq-consumption.md#pull-path,
docs/protocols/rocketmq-consumption.md#sql92-filters)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tidemq.broker.clients import SubscriptionData
from tidemq.broker.processors import register_table
from tidemq.broker.processors.send import subscription_group
from tidemq.filter import SQL92, TAG, SqlParseError
from tidemq.histogram import timed
from tidemq.record import decode_properties
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.headers import PullMessageRequestHeader
from tidemq.remoting.transport import RemotingConnection, RequestDispatcher
from tidemq.store import GetStatus

if TYPE_CHECKING:
    from tidemq.broker.broker import Broker

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4

_NOT_FOUND_OR_MOVED = {GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE}
_CODES = {
    GetStatus.FOUND: ResponseCode.SUCCESS,
    GetStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


def register(dispatcher: RequestDispatcher, broker: Broker) -> None:
    register_table(dispatcher, broker, {RequestCode.PULL_MESSAGE: timed(broker.pull_latency, pull_message)})


def tag_matcher(sub: SubscriptionData) -> Callable[[int], bool] | None:
    if sub.matches_all or sub.sql is not None:
        return None
    codes = frozenset(sub.code_set)

    def match(tags_code: int) -> bool:
        code = tags_code & 0xFFFFFFFF
        return (code - 0x100000000 if code & 0x80000000 else code) in codes

    return match


def properties_matcher(sub: SubscriptionData) -> Callable[[bytes], bool] | None:
    """An SQL92 subscription's test of one record's encoded properties (Java's isMatchedByCommitLog)."""
    sql = sub.sql
    if sql is None:
        return None

    def match(props: bytes) -> bool:
        return sql.matches(decode_properties(props.decode(errors="replace")))

    return match


def _subscription(
    broker: Broker, req: RemotingCommand, h: PullMessageRequestHeader
) -> SubscriptionData | RemotingCommand:
    if h.sys_flag & FLAG_SUBSCRIPTION:
        expression_type = h.expression_type or TAG
        if expression_type not in (TAG, SQL92):
            return req.error(
                ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                f"the broker does not support {expression_type} filtering, only TAG and SQL92",
            )
        try:
            return SubscriptionData.from_expression(h.topic, h.subscription, h.sub_version, expression_type)
        except SqlParseError as e:
            return req.error(
                ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"parse the consumer's subscription failed: {e}"
            )
    info = broker.clients.consumers.get(h.consumer_group)
    if info is None:
        return req.error(
            ResponseCode.SUBSCRIPTION_NOT_EXIST,
            f"the consumer's group info not exist, group: {h.consumer_group}",
        )
    sub = info.subscriptions.get(h.topic)
    if sub is None:
        return req.error(
            ResponseCode.SUBSCRIPTION_NOT_EXIST,
            f"the consumer's subscription not exist, group: {h.consumer_group} topic: {h.topic}",
        )
    if sub.sub_version < h.sub_version:
        return req.error(
            ResponseCode.SUBSCRIPTION_NOT_LATEST, f"the consumer's subscription not latest, {sub.sub_string}"
        )
    if sub.expression_type not in ("", TAG, SQL92):
        return req.error(
            ResponseCode.SYSTEM_ERROR, f"the broker does not support {sub.expression_type} filtering"
        )
    return sub


def pull_message(
    broker: Broker, conn: RemotingConnection, req: RemotingCommand, allow_suspend: bool = True
) -> RemotingCommand | None:
    h = PullMessageRequestHeader.from_ext(req.ext_fields)
    if not broker.config.readable:
        return req.error(
            ResponseCode.NO_PERMISSION,
            f"the broker[{broker.config.broker_name}] pulling message is forbidden",
        )
    group = subscription_group(broker, h.consumer_group)
    if group is None:
        return req.error(
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
            f"subscription group [{h.consumer_group}] does not exist",
        )
    if not group.consume_enable:
        return req.error(ResponseCode.NO_PERMISSION, f"subscription group no permission, {h.consumer_group}")
    topic = broker.topics.get(h.topic)
    if topic is None:
        return req.error(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!")
    if not topic.readable:
        return req.error(ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] pulling message is forbidden")
    if h.queue_id < 0 or h.queue_id >= topic.read_queue_nums:
        return req.error(
            ResponseCode.SYSTEM_ERROR,
            f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] "
            f"topicConfig.readQueueNums:[{topic.read_queue_nums}]",
        )
    sub = _subscription(broker, req, h)
    if isinstance(sub, RemotingCommand):
        return sub
    match = tag_matcher(sub)
    result = broker.store.get(
        h.topic,
        h.queue_id,
        h.queue_offset,
        h.max_msg_nums,
        match,
        max_transfer=broker.config.max_transfer_count,
        props_match=properties_matcher(sub),
    )
    if result.status in _NOT_FOUND_OR_MOVED:
        code = ResponseCode.PULL_NOT_FOUND if h.queue_offset == 0 else ResponseCode.PULL_OFFSET_MOVED
    else:
        code = _CODES[result.status]
    if allow_suspend and h.sys_flag & FLAG_COMMIT_OFFSET:
        broker.consumer_offsets.set(f"{h.topic}@{h.consumer_group}", h.queue_id, h.commit_offset)
    if code == ResponseCode.PULL_NOT_FOUND and allow_suspend and h.sys_flag & FLAG_SUSPEND:
        timeout_ms = (
            h.suspend_timeout_millis if broker.config.long_polling else broker.config.short_polling_ms
        )
        refusal = broker.holds.refusal(conn)
        if refusal is not None:
            return req.error(ResponseCode.SYSTEM_BUSY, refusal)
        broker.holds.hold(h.topic, h.queue_id, conn, req, h.queue_offset, match, max(0, timeout_ms) / 1000)
        return None
    ext = {
        "suggestWhichBrokerId": "0",
        "nextBeginOffset": str(result.next_begin_offset),
        "minOffset": str(result.min_offset),
        "maxOffset": str(result.max_offset),
    }
    if result.count:
        broker.stats["get"] += result.count
        broker.pulled.record(h.topic, h.consumer_group, result.count)
    return req.response(code, result.status.value, ext, result.records)
