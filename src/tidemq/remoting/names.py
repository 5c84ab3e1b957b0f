"""Names both ends of the RocketMQ protocol agree on: the retry and dead-letter topics of a consumer
group, the reserved topics a client must leave alone, and Java's camelCase spelling of a field.

They live here, in the protocol package, because the broker (which creates and routes these topics)
and the clients (which subscribe to and send to them) both import ``remoting/`` and nothing else of
each other.
"""

from __future__ import annotations

import functools
import re

#: A group's retry topic is ``%RETRY%<group>``: messages its consumers failed, due again after a delay.
RETRY_PREFIX = "%RETRY%"
#: A group's dead-letter topic is ``%DLQ%<group>``: messages that failed past the group's retry limit.
DLQ_PREFIX = "%DLQ%"
#: The template topic new topics are auto-created from (Java TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC).
AUTO_CREATE_TOPIC_KEY = "TBW102"
#: Where delayed messages wait for their delivery time, one queue per delay level.
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
#: Where a transaction's half message waits for its producer's commit or rollback (Java
#: TopicValidator.RMQ_SYS_TRANS_HALF_TOPIC), always in queue 0.
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
#: The op log of decided transactions: one entry per half message committed or rolled back, its body the
#: half message's queue offset, tagged ``d`` (Java RMQ_SYS_TRANS_OP_HALF_TOPIC and REMOVETAG).
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_OP_TAG = "d"
#: The system group whose consumer offsets on the two transaction queues are the broker's scan position
#: (Java MixAll.CID_SYS_RMQ_TRANS).
TRANS_CHECK_GROUP = "CID_RMQ_SYS_TRANS"
#: Where timer messages wait for their delivery time (Java TimerMessageStore.TIMER_TOPIC): queue 0
#: holds the messages, queue 1 the timer's delivery checkpoints (tidemq's own).
TIMER_TOPIC = "rmq_sys_wheel_timer"
#: Topics named ``rmq_sys_...`` are the system's own (Java TopicValidator.SYSTEM_TOPIC_PREFIX).
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
#: The MSG_TYPE of a reply: a producer sends it with SEND_REPLY_MESSAGE(_V2) (Java MixAll.REPLY_MESSAGE_FLAG).
REPLY_MESSAGE_FLAG = "reply"


#: Topic names are at most this long (Java TopicValidator.TOPIC_MAX_LENGTH).
MAX_TOPIC_LENGTH = 127
#: Group names are at most this long (Java Validators.CHARACTER_MAX_LENGTH).
MAX_GROUP_LENGTH = 255
#: The characters a topic or group name may hold, as Java's pattern spells them (for error messages).
NAME_CHARACTERS = "[%|a-zA-Z0-9_-]"
_NAME_PATTERN = re.compile(NAME_CHARACTERS + "+")


def well_formed_name(name: str, max_length: int = MAX_TOPIC_LENGTH) -> bool:
    """Whether ``name`` can name a topic (or, with MAX_GROUP_LENGTH, a group): 1 to ``max_length`` of
    NAME_CHARACTERS. Whole-string match, as Java's ``Pattern.matches``: a trailing newline is refused."""
    return 0 < len(name) <= max_length and _characters_allowed(name)


@functools.lru_cache(maxsize=4096)
def _characters_allowed(name: str) -> bool:
    """Remembered per name (only names already within a length bound reach it, so the cache stays small):
    every send checks its topic, and the pattern costs more than the look-up."""
    return _NAME_PATTERN.fullmatch(name) is not None


def reply_topic(cluster: str) -> str:
    """``<cluster>_REPLY_TOPIC``: every broker of a cluster has it, and replies are sent to it."""
    return cluster + "_REPLY_TOPIC"


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group


def camel(name: str) -> str:
    """A snake_case attribute name as Java spells the field: ``consumer_group`` -> ``consumerGroup``."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)
