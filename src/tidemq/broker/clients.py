"""Registry of producer and consumer connections, fed by heartbeats
(docs/protocols/rocketmq-remoting.md#client-management-commands,
docs/protocols/rocketmq-consumption.md#client-registry).

The registry is keyed by connection, not client id, like Java's: a closed or silent connection drops
out, and every remaining member of its consumer group is told to rebalance. Clients of the other
front-ends (the gRPC endpoint's 5.x SDKs) have no remoting connection: their front-end registers them
here by client id (``register_front_end_*``), so the admin views a RocketMQ operator reads (consumer
connections, who consumes a topic) show them beside the remoting clients, as a 5.x proxy's broker does.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from tidemq.filter import SQL92, SqlExpression, compile_sql
from tidemq.record import tag_hash
from tidemq.remoting.codes import RequestCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.transport import RemotingConnection

log = logging.getLogger(__name__)


@dataclass(slots=True)
class SubscriptionData:
    topic: str
    sub_string: str
    tags_set: list[str] = field(default_factory=list)
    code_set: list[int] = field(default_factory=list)
    sub_version: int = 0
    expression_type: str = "TAG"
    class_filter_mode: bool = False
    #: The compiled SQL92 expression of an ``SQL92`` subscription (docs/protocols/rocketmq-consumption.md).
    sql: SqlExpression | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_expression(
        cls, topic: str, expression: str | None, sub_version: int = 0, expression_type: str | None = None
    ) -> SubscriptionData:
        """Parse a tag expression (``*``, ``a || b``) the way Java's FilterAPI does, or compile an SQL92
        one (raising SqlParseError, which the broker answers with SUBSCRIPTION_PARSE_FAILED)."""
        if expression_type == SQL92:
            sql = compile_sql(expression or "")
            return cls(topic, expression or "", sub_version=sub_version, expression_type=SQL92, sql=sql)
        expr = (expression or "").strip() or "*"
        if expr == "*":
            return cls(topic, "*", sub_version=sub_version, expression_type=expression_type or "TAG")
        tags = [t.strip() for t in expr.split("||") if t.strip()]
        return cls(topic, expr, tags, [tag_hash(t) for t in tags], sub_version, expression_type or "TAG")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SubscriptionData:
        tags = [str(t) for t in data.get("tagsSet") or []]
        codes = [int(c) for c in data.get("codeSet") or []] or [tag_hash(t) for t in tags]
        expression_type = str(data.get("expressionType") or "TAG")
        if expression_type == SQL92:
            return cls.from_expression(
                str(data.get("topic", "")),
                str(data.get("subString") or ""),
                int(data.get("subVersion") or 0),
                SQL92,
            )
        return cls(
            topic=str(data.get("topic", "")),
            sub_string=str(data.get("subString") or "*"),
            tags_set=tags,
            code_set=codes,
            sub_version=int(data.get("subVersion") or 0),
            expression_type=expression_type,
            class_filter_mode=bool(data.get("classFilterMode", False)),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "classFilterMode": self.class_filter_mode,
            "topic": self.topic,
            "subString": self.sub_string,
            "tagsSet": self.tags_set,
            "codeSet": self.code_set,
            "subVersion": self.sub_version,
            "expressionType": self.expression_type,
        }

    @property
    def matches_all(self) -> bool:
        return self.sql is None and (self.class_filter_mode or self.sub_string in ("*", ""))

    def same_filter(self, other: SubscriptionData) -> bool:
        return (self.sub_string, self.expression_type) == (other.sub_string, other.expression_type)


@dataclass(slots=True)
class ClientChannel:
    client_id: str
    language: int
    version: int
    last_update: float


@dataclass(slots=True)
class ConsumerGroupInfo:
    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    channels: dict[RemotingConnection, ClientChannel] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return [ch.client_id for ch in self.channels.values()]


@dataclass(slots=True)
class FrontEndClient:
    """A producer or consumer connected through another front-end: what the admin views show of it."""

    client_id: str
    address: str
    language: int
    version: int
    #: A consumer's ConsumeType name (a 5.x SimpleConsumer pulls: CONSUME_ACTIVELY; a PushConsumer is
    #: CONSUME_PASSIVELY) and its subscriptions; unused for a producer.
    consume_type: str = "CONSUME_PASSIVELY"
    subscriptions: list[SubscriptionData] = field(default_factory=list)


class ClientManager:
    def __init__(self, channel_expiry_s: float = 120.0) -> None:
        self.channel_expiry_s = channel_expiry_s
        self.consumers: dict[str, ConsumerGroupInfo] = {}
        self.producers: dict[str, dict[RemotingConnection, ClientChannel]] = {}
        self.notify_enabled: dict[str, bool] = {}
        #: Other front-ends' clients, by group then client id (they live as long as their front-end says).
        self.front_end_consumers: dict[str, dict[str, FrontEndClient]] = {}
        self.front_end_producers: dict[str, dict[str, FrontEndClient]] = {}

    def register_front_end_consumer(self, group: str, client: FrontEndClient) -> None:
        self.front_end_consumers.setdefault(group, {})[client.client_id] = client

    def register_front_end_producer(self, group: str, client: FrontEndClient) -> None:
        self.front_end_producers.setdefault(group, {})[client.client_id] = client

    def unregister_front_end(self, client_id: str) -> None:
        """Forget a front-end's client in every group (it said goodbye, or its stream ended)."""
        for table in (self.front_end_consumers, self.front_end_producers):
            for group in list(table):
                table[group].pop(client_id, None)
                if not table[group]:
                    del table[group]

    def register_consumer(
        self,
        group: str,
        conn: RemotingConnection,
        channel: ClientChannel,
        consume_type: str,
        message_model: str,
        consume_from_where: str,
        subscriptions: list[SubscriptionData],
    ) -> bool:
        """Add or refresh a consumer connection; True when members or subscriptions changed."""
        info = self.consumers.get(group)
        if info is None:
            info = self.consumers[group] = ConsumerGroupInfo(group)
        info.consume_type, info.message_model, info.consume_from_where = (
            consume_type,
            message_model,
            consume_from_where,
        )
        changed = conn not in info.channels
        info.channels[conn] = channel
        wanted = {sub.topic: sub for sub in subscriptions}
        for topic, sub in wanted.items():
            old = info.subscriptions.get(topic)
            if old is None:
                info.subscriptions[topic] = sub
                changed = True
            elif sub.sub_version > old.sub_version:
                if not old.same_filter(sub):
                    changed = True
                info.subscriptions[topic] = sub
        for topic in [t for t in info.subscriptions if t not in wanted]:
            del info.subscriptions[topic]
            changed = True
        return changed

    def register_producer(self, group: str, conn: RemotingConnection, channel: ClientChannel) -> None:
        self.producers.setdefault(group, {})[conn] = channel

    def unregister_consumer(self, group: str, conn: RemotingConnection) -> bool:
        info = self.consumers.get(group)
        if info is None or info.channels.pop(conn, None) is None:
            return False
        if not info.channels:
            del self.consumers[group]
            log.info("consumer group %s has no members left", group)
        return True

    def unregister_producer(self, group: str, conn: RemotingConnection) -> None:
        channels = self.producers.get(group)
        if channels is not None:
            channels.pop(conn, None)
            if not channels:
                del self.producers[group]

    def connection_closed(self, conn: RemotingConnection) -> list[str]:
        """Forget a connection everywhere; returns the consumer groups that lost a member."""
        for group in list(self.producers):
            self.unregister_producer(group, conn)
        return [group for group in list(self.consumers) if self.unregister_consumer(group, conn)]

    def expired_connections(self) -> list[RemotingConnection]:
        deadline = time.monotonic() - self.channel_expiry_s
        stale: set[RemotingConnection] = set()
        for info in self.consumers.values():
            stale.update(c for c, ch in info.channels.items() if ch.last_update < deadline)
        for channels in self.producers.values():
            stale.update(c for c, ch in channels.items() if ch.last_update < deadline)
        return list(stale)

    def consumer_ids(self, group: str) -> list[str]:
        info = self.consumers.get(group)
        return info.client_ids() if info else []

    def find_consumer(self, group: str, client_id: str) -> RemotingConnection | None:
        info = self.consumers.get(group)
        if info is None:
            return None
        for conn, ch in info.channels.items():
            if ch.client_id == client_id and not conn.is_closed:
                return conn
        return None

    def find_producer(self, client_id: str) -> RemotingConnection | None:
        """An open connection of the client ``client_id`` that heartbeats a producer group: where a
        reply to that client's request is pushed (Java ProducerManager.findChannel)."""
        for channels in self.producers.values():
            for conn, ch in channels.items():
                if ch.client_id == client_id and not conn.is_closed:
                    return conn
        return None

    def notify_ids_changed(self, group: str) -> None:
        """Tell every member of ``group`` to rebalance now (oneway NOTIFY_CONSUMER_IDS_CHANGED)."""
        info = self.consumers.get(group)
        if info is None or not self.notify_enabled.get(group, True):
            return
        for conn in list(info.channels):
            if not conn.is_closed:
                conn.invoke_oneway(
                    RemotingCommand(
                        RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, ext_fields={"consumerGroup": group}
                    )
                )
