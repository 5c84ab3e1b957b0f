"""UPDATE_AND_CREATE_TOPIC with RocketMQ 5.x topic attributes (``attributes`` ext field, e.g.
``+message.type=FIFO``): the change is checked first, a refused one answers SYSTEM_ERROR with the 5.x
broker's remark and creates nothing; then the topic is created as any other (processors/admin.py) and
keeps the resulting attributes. An update without the field keeps the topic's attributes."""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from tidemq.broker.processors import admin, register_table
from tidemq.broker.topic_attributes import MESSAGE_TYPE, MIXED, AttributeProblem, apply_changes, parse_changes
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.transport import RemotingConnection, RequestDispatcher

if TYPE_CHECKING:
    from tidemq.broker.broker import Broker

log = logging.getLogger(__name__)
Result = RemotingCommand | Awaitable[RemotingCommand]


def register(dispatcher: RequestDispatcher, broker: Broker) -> None:
    register_table(dispatcher, broker, {RequestCode.UPDATE_AND_CREATE_TOPIC: create_topic})


def create_topic(broker: Broker, conn: RemotingConnection, req: RemotingCommand) -> Result:
    topic = req.ext_fields.get("topic", "")
    existing = broker.topics.get(topic)
    current = dict(existing.attributes) if existing is not None else None
    try:
        attributes = apply_changes(current, parse_changes(req.ext_fields.get("attributes")))
    except AttributeProblem as exc:
        log.info("topic %s not created: %s", topic, exc)
        return req.error(ResponseCode.SYSTEM_ERROR, str(exc))
    if attributes.get(MESSAGE_TYPE) == MIXED:
        return req.error(ResponseCode.SYSTEM_ERROR, "MIXED message type is not supported.")
    result = admin.create_topic(broker, conn, req)
    if isinstance(result, RemotingCommand) and result.code != ResponseCode.SUCCESS:
        return result
    # admin stored a fresh config (no attributes) synchronously; give it the attributes before anyone
    # can read it (no await in between).
    config = broker.topics.get(topic)
    if config is not None and config.attributes != attributes:
        config.attributes = attributes
        broker.topics.table.persist()
    return result
