"""Topic configuration as the broker enforces it: system topics, name rules, auto-creation
(docs/protocols/rocketmq-messages.md#topics-and-groups)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from tidemq.broker.config import BrokerConfig
from tidemq.broker.metadata import TopicConfig, TopicConfigTable
from tidemq.remoting.names import (
    AUTO_CREATE_TOPIC_KEY,
    MAX_TOPIC_LENGTH,
    NAME_CHARACTERS,
    SCHEDULE_TOPIC,
    SYSTEM_TOPIC_PREFIX,
    TIMER_TOPIC,
    reply_topic,
    well_formed_name,
)
from tidemq.remoting.route import PERM_INHERIT, PERM_READ, PERM_WRITE

log = logging.getLogger(__name__)

SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
#: Topics a producer may not send to (Java TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET).
NOT_SENDABLE = frozenset(
    {
        SCHEDULE_TOPIC,
        TIMER_TOPIC,
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)
SYSTEM_TOPICS = NOT_SENDABLE | {AUTO_CREATE_TOPIC_KEY, "BenchmarkTest", "RMQ_SYS_TRACE_TOPIC"}


def name_problem(name: str, what: str = "topic") -> str | None:
    """Why ``name`` is not a valid topic or group name
    (docs/protocols/rocketmq-messages.md#topics-and-groups), or None."""
    if not name or not name.strip():
        return f"the specified {what} is blank"
    if len(name) > MAX_TOPIC_LENGTH:
        return f"the specified {what} is longer than {MAX_TOPIC_LENGTH} characters"
    if not well_formed_name(name):
        return (
            f"the specified {what} [{name}] contains illegal characters, allowing only ^{NAME_CHARACTERS}+$"
        )
    return None


def is_system_topic(name: str) -> bool:
    return name in SYSTEM_TOPICS or name.startswith(SYSTEM_TOPIC_PREFIX)


class TopicManager:
    def __init__(
        self, table: TopicConfigTable, config: BrokerConfig, on_change: Callable[[TopicConfig], None]
    ) -> None:
        """``on_change``: told of each created or updated topic, to register it with the name servers
        (alone, as Java's registerIncrementBrokerData does)."""
        self.table = table
        self.config = config
        self.on_change = on_change
        self._ensure_system_topics()

    def _ensure_system_topics(self) -> None:
        wanted = [
            TopicConfig(SELF_TEST_TOPIC, 1, 1),
            TopicConfig(SCHEDULE_TOPIC, 18, 18),
            TopicConfig(OFFSET_MOVED_EVENT, 1, 1),
            TopicConfig(self.config.cluster_name, 16, 16, PERM_INHERIT | PERM_READ | PERM_WRITE),
            TopicConfig(self.config.broker_name, 1, 1, PERM_INHERIT | PERM_READ | PERM_WRITE),
            # Where request-reply's replies are sent (docs/protocols/rocketmq-request-reply.md).
            TopicConfig(reply_topic(self.config.cluster_name), 1, 1),
        ]
        if self.config.auto_create_topic:
            queues = self.config.default_topic_queue_nums
            wanted.append(
                TopicConfig(AUTO_CREATE_TOPIC_KEY, queues, queues, PERM_INHERIT | PERM_READ | PERM_WRITE)
            )
        for cfg in wanted:
            if cfg.topic_name not in self.table.topics:
                self.table.topics[cfg.topic_name] = cfg
        if not self.config.auto_create_topic:
            self.table.topics.pop(AUTO_CREATE_TOPIC_KEY, None)
        self.table.persist()

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def all(self) -> dict[str, TopicConfig]:
        return self.table.topics

    def create_or_update(self, config: TopicConfig) -> None:
        self.table.put(config)
        log.info(
            "topic %s: %d read / %d write queues, perm %d",
            config.topic_name,
            config.read_queue_nums,
            config.write_queue_nums,
            config.perm,
        )
        self.on_change(config)

    def create_in_send(
        self, topic: str, default_topic: str, queue_nums: int, topic_sys_flag: int
    ) -> TopicConfig | None:
        """Auto-create ``topic`` from the template named by the producer
        (docs/protocols/rocketmq-messages.md#topics-and-groups)."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        template = self.table.get(default_topic)
        if template is None or (not self.config.auto_create_topic and default_topic == AUTO_CREATE_TOPIC_KEY):
            return None
        if not template.perm & PERM_INHERIT:
            return None
        queues = max(1, min(queue_nums, template.write_queue_nums))
        config = TopicConfig(
            topic, queues, queues, template.perm & ~PERM_INHERIT, "SINGLE_TAG", topic_sys_flag
        )
        self.create_or_update(config)
        return config

    def ensure(self, topic: str, queue_nums: int, perm: int = PERM_READ | PERM_WRITE) -> TopicConfig:
        """Get or create an internal topic (retry, dead-letter) with a fixed queue count."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        config = TopicConfig(topic, queue_nums, queue_nums, perm)
        self.create_or_update(config)
        return config

    def delete(self, topic: str) -> bool:
        """Forget ``topic`` here. The name servers are not told (Java's broker does not register on a
        delete either): their route goes with DELETE_TOPIC_IN_NAMESRV, which an admin sends next."""
        return self.table.remove(topic) is not None
