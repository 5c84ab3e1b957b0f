"""INVOKE_BROKER_TO_RESET_OFFSET: move a consumer group's offsets while its consumers are online.

Committing new offsets with UPDATE_CONSUMER_OFFSET is not enough for a running group: its consumers keep
their own offsets in memory and commit them back. So the broker computes the offsets for the timestamp
and tells every online member with RESET_CONSUMER_CLIENT_OFFSET, which drops its queues and resumes from
the new offsets, as Java 4.9.x's Broker2Client.resetOffset does. With no member online the admin hears
CONSUMER_NOT_ONLINE and commits the offsets itself (mqadmin's fallback).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tidemq.broker.processors import register_table
from tidemq.remoting import jsonx
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.headers import ResetOffsetRequestHeader
from tidemq.remoting.transport import RemotingConnection, RequestDispatcher

if TYPE_CHECKING:
    from tidemq.broker.broker import Broker

log = logging.getLogger(__name__)
#: The timestamp that means "each queue's max offset" (mqadmin's ``-t now``).
LATEST = -1


def register(dispatcher: RequestDispatcher, broker: Broker) -> None:
    register_table(dispatcher, broker, {RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: reset_offset})


def target_offsets(broker: Broker, h: ResetOffsetRequestHeader) -> dict[int, int] | str:
    """Each queue's new offset, or the reason there is none. Without ``isForce`` a queue only moves back."""
    config = broker.topics.get(h.topic)
    if config is None:
        return f"[reset-offset] reset offset failed, no topic in this broker. topic={h.topic}"
    key = f"{h.topic}@{h.group}"
    committed = {q: broker.consumer_offsets.get(key, q) for q in range(config.write_queue_nums)}
    if all(o is None for o in committed.values()):
        return f"THe consumer group <{h.group}> not exist"
    table: dict[int, int] = {}
    for queue_id, current in committed.items():
        if h.timestamp == LATEST:
            offset = broker.store.max_offset(h.topic, queue_id)
        else:
            offset = broker.store.search_offset_by_timestamp(h.topic, queue_id, h.timestamp)
        offset = max(offset, 0)
        # A queue the group never committed on moves like a forced one.
        table[queue_id] = offset if h.is_force or current is None or offset < current else current
    return table


def reset_offset(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> RemotingCommand:
    h = ResetOffsetRequestHeader.from_ext(req.ext_fields)
    table = target_offsets(broker, h)
    if isinstance(table, str):
        return req.error(ResponseCode.SYSTEM_ERROR, table)
    info = broker.clients.consumers.get(h.group)
    members = [c for c in (info.channels if info else ()) if not c.is_closed]
    if not members:
        return req.error(
            ResponseCode.CONSUMER_NOT_ONLINE,
            f"Consumer not online, so can not reset offset, Group: {h.group} Topic: {h.topic} "
            f"Timestamp: {h.timestamp}",
        )
    body = jsonx.dumps_object_keys(
        {
            "offsetTable": {
                jsonx.object_key(brokerName=broker.config.broker_name, queueId=q, topic=h.topic): offset
                for q, offset in table.items()
            }
        }
    )
    for member in members:
        member.invoke_oneway(
            RemotingCommand(
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                ext_fields={
                    "topic": h.topic,
                    "group": h.group,
                    "timestamp": str(h.timestamp),
                    "isForce": "true" if h.is_force else "false",
                },
                body=body,
            )
        )
    log.info("reset %s on %s to %s for %d online consumers", h.group, h.topic, h.timestamp, len(members))
    return req.response(body=body)
