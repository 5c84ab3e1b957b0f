"""Parsing and checking the source and sink options (no I/O).

Every problem becomes an ``OptionError`` whose message starts with the option's name, so the Spark
error a user sees says which option to fix.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import orjson

from tidemq.filter import SQL92, TAG, SqlParseError, compile_sql
from tidemq.remoting.names import MAX_GROUP_LENGTH, MAX_TOPIC_LENGTH, NAME_CHARACTERS, well_formed_name

log = logging.getLogger(__name__)

#: JSON offset values with a special meaning, as in Spark's Kafka source.
EARLIEST = -2
LATEST = -1

_TAG = re.compile(r"^[^|]+$")
_ADDR = re.compile(r"^[^:;,\s]+:\d{1,5}$")

READ_OPTIONS = {
    "namesrv",
    "topic",
    "startingoffsets",
    "endingoffsets",
    "maxoffsetspertrigger",
    "failondataloss",
    "tags",
    "pullbatchsize",
    "consumergroup",
    "sql",
    "accesskey",
    "secretkey",
}
WRITE_OPTIONS = {"namesrv", "topic", "producergroup", "batchsize", "accesskey", "secretkey"}
#: Options Spark itself adds or that belong to the engine, not to this source.
_ENGINE_OPTIONS = {"path", "checkpointlocation", "queryname"}

Mode = Literal["batch", "stream"]
OffsetSpec = Literal["earliest", "latest"] | dict[str, dict[str, int]]


class OptionError(ValueError):
    """A source or sink option is missing or malformed."""


def queue_key(broker: str, queue_id: int) -> str:
    return f"{broker}:{queue_id}"


def split_queue_key(key: str) -> tuple[str, int]:
    broker, sep, queue = key.rpartition(":")
    if not sep or not broker or not queue.isdigit():
        raise ValueError(key)
    return broker, int(queue)


@dataclass(frozen=True, slots=True)
class ReadOptions:
    namesrv: str
    topics: tuple[str, ...]
    starting: OffsetSpec
    ending: OffsetSpec = "latest"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    tags: str = "*"
    tag_set: frozenset[str] = field(default_factory=frozenset)
    pull_batch_size: int = 32
    consumer_group: str | None = None
    #: An SQL92 expression over message properties, evaluated by the broker (MessageSelector.bySql).
    sql: str | None = None
    #: (accessKey, secretKey): every request to the name server and brokers is signed (plain ACL).
    credentials: tuple[str, str] | None = None

    @property
    def filtered(self) -> bool:
        """Whether answers may skip offsets: a filtered pull returns only the matching messages."""
        return bool(self.tag_set) or self.sql is not None

    @property
    def subscription(self) -> tuple[str, str]:
        """The expression and its type as PULL_MESSAGE posts them."""
        return (self.sql, SQL92) if self.sql is not None else (self.tags, TAG)

    @property
    def pull_group(self) -> str:
        """The group named in PULL_MESSAGE: brokers require one, and it shows who reads in broker stats."""
        return self.consumer_group or "tidemq-spark-reader"


@dataclass(frozen=True, slots=True)
class WriteOptions:
    namesrv: str
    topic: str | None
    producer_group: str = "tidemq-spark-writer"
    batch_size: int = 1000
    credentials: tuple[str, str] | None = None


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _warn_unknown(opts: dict[str, str], known: set[str], what: str) -> None:
    unknown = sorted(set(opts) - known - _ENGINE_OPTIONS)
    if unknown:
        log.warning("rocketmq %s: ignoring unknown option(s) %s", what, ", ".join(unknown))


def _namesrv(opts: dict[str, str]) -> str:
    value = opts.get("namesrv", "").strip()
    if not value:
        raise OptionError("namesrv: required (the name server address, host:port, several separated by ';')")
    addrs = [a.strip() for a in value.replace(",", ";").split(";") if a.strip()]
    bad = [a for a in addrs if not _ADDR.match(a)]
    if bad or not addrs:
        raise OptionError(f"namesrv: {value!r} is not host:port (several separated by ';')")
    return ";".join(addrs)


def _topic_name(option: str, name: str) -> str:
    if not well_formed_name(name):
        raise OptionError(
            f"{option}: {name!r} is not a valid topic name"
            f" (1-{MAX_TOPIC_LENGTH} characters of {NAME_CHARACTERS})"
        )
    return name


def _positive_int(
    opts: dict[str, str], option: str, default: int | None, upper: int | None = None
) -> int | None:
    raw = opts.get(option.lower())
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"{option}: {raw!r} is not an integer") from None
    if value <= 0 or (upper is not None and value > upper):
        limit = f"1..{upper}" if upper is not None else "positive"
        raise OptionError(f"{option}: {value} is out of range ({limit})")
    return value


def _bool(opts: dict[str, str], option: str, default: bool) -> bool:
    raw = opts.get(option.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"{option}: {raw!r} is not true or false")
    return value == "true"


def parse_tags(raw: str | None) -> tuple[str, frozenset[str]]:
    """A RocketMQ tag expression: ``*`` or ``a || b``; returns the expression and its tag set."""
    if raw is None or raw.strip() in ("", "*"):
        return "*", frozenset()
    tags = [t.strip() for t in raw.split("||")]
    if any(not t or not _TAG.match(t) or t == "*" for t in tags):
        raise OptionError(f"tags: {raw!r} is not a tag expression ('*' or 'tagA || tagB')")
    return " || ".join(tags), frozenset(tags)


def parse_sql(raw: str | None) -> str | None:
    """An SQL92 expression, compiled here so a malformed one fails the query before any pull."""
    if raw is None or not raw.strip():
        return None
    try:
        compile_sql(raw.strip())
    except SqlParseError as exc:
        raise OptionError(f"sql: {raw!r} is not an SQL92 filter expression: {exc}") from None
    return raw.strip()


def parse_credentials(opts: dict[str, str]) -> tuple[str, str] | None:
    """accessKey and secretKey, both or neither: a signature needs the pair."""
    access = opts.get("accesskey", "").strip()
    secret = opts.get("secretkey", "").strip()
    if access and not secret:
        raise OptionError("secretKey: required with accessKey (the account's secret key)")
    if secret and not access:
        raise OptionError("accessKey: required with secretKey (the account's access key)")
    return (access, secret) if access else None


def parse_offsets(option: str, raw: str | None, default: str, topics: tuple[str, ...]) -> OffsetSpec:
    """``earliest``, ``latest`` or JSON ``{"topic": {"broker:queue": offset}}`` (-2 earliest, -1 latest)."""
    value = (raw if raw is not None and raw.strip() else default).strip()
    if value.lower() in ("earliest", "latest"):
        return "earliest" if value.lower() == "earliest" else "latest"
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise OptionError(
            f"{option}: not 'earliest', 'latest' or JSON like {{\"topic\": {{\"broker-a:0\": 42}}}} ({exc})"
        ) from None
    if not isinstance(data, dict) or not data:
        raise OptionError(
            f'{option}: the JSON must be an object of topics, like {{"topic": {{"broker-a:0": 42}}}}'
        )
    out: dict[str, dict[str, int]] = {}
    for topic, queues in data.items():
        if topic not in topics:
            raise OptionError(
                f"{option}: topic {topic!r} is not one of the topics read ({', '.join(topics)})"
            )
        if not isinstance(queues, dict) or not queues:
            raise OptionError(f'{option}: topic {topic!r} must map to an object of "broker:queue": offset')
        out[topic] = {}
        for key, offset in queues.items():
            try:
                broker, queue = split_queue_key(str(key))
            except ValueError:
                raise OptionError(
                    f'{option}: {key!r} in topic {topic!r} is not "brokerName:queueId"'
                ) from None
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise OptionError(
                    f"{option}: offset {offset!r} of {topic} {key} is not an offset "
                    "(>= 0, -2 earliest, -1 latest)"
                )
            out[topic][queue_key(broker, queue)] = offset
    return out


def read_options(options: Mapping[str, str], mode: Mode) -> ReadOptions:
    opts = _lower(options)
    _warn_unknown(opts, READ_OPTIONS, "source")
    namesrv = _namesrv(opts)
    raw_topics = opts.get("topic", "")
    topics = tuple(dict.fromkeys(t.strip() for t in raw_topics.split(",") if t.strip()))
    if not topics:
        raise OptionError("topic: required (one topic, or several separated by commas)")
    for t in topics:
        _topic_name("topic", t)
    starting = parse_offsets(
        "startingOffsets", opts.get("startingoffsets"), "earliest" if mode == "batch" else "latest", topics
    )
    ending: OffsetSpec = "latest"
    if mode == "batch":
        if starting == "latest":
            raise OptionError(
                "startingOffsets: 'latest' is not allowed in a batch query (it would read nothing)"
            )
        ending = parse_offsets("endingOffsets", opts.get("endingoffsets"), "latest", topics)
        if ending == "earliest":
            raise OptionError(
                "endingOffsets: 'earliest' is not allowed in a batch query (it would read nothing)"
            )
        if isinstance(ending, dict) and any(o == EARLIEST for q in ending.values() for o in q.values()):
            raise OptionError("endingOffsets: -2 (earliest) is not allowed as an ending offset")
        if "maxoffsetspertrigger" in opts:
            raise OptionError("maxOffsetsPerTrigger: only for streaming queries")
    elif "endingoffsets" in opts:
        raise OptionError("endingOffsets: only for batch queries (a stream has no end)")
    tags, tag_set = parse_tags(opts.get("tags"))
    sql = parse_sql(opts.get("sql"))
    if sql is not None and tag_set:
        raise OptionError("sql: cannot be combined with tags (a subscription has one expression)")
    group = opts.get("consumergroup", "").strip() or None
    if group is not None and not well_formed_name(group, MAX_GROUP_LENGTH):
        raise OptionError(
            f"consumerGroup: {group!r} is not a valid group name"
            f" (1-{MAX_GROUP_LENGTH} characters of {NAME_CHARACTERS})"
        )
    return ReadOptions(
        namesrv=namesrv,
        topics=topics,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=_positive_int(opts, "maxOffsetsPerTrigger", None),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        tags=tags,
        tag_set=tag_set,
        pull_batch_size=_positive_int(opts, "pullBatchSize", 32, upper=1024) or 32,
        consumer_group=group,
        sql=sql,
        credentials=parse_credentials(opts),
    )


def write_options(options: Mapping[str, str]) -> WriteOptions:
    opts = _lower(options)
    _warn_unknown(opts, WRITE_OPTIONS, "sink")
    topic = opts.get("topic", "").strip() or None
    if topic is not None:
        _topic_name("topic", topic)
    group = opts.get("producergroup", "").strip() or "tidemq-spark-writer"
    if not well_formed_name(group, MAX_GROUP_LENGTH):
        raise OptionError(f"producerGroup: {group!r} is not a valid group name")
    return WriteOptions(
        namesrv=_namesrv(opts),
        topic=topic,
        producer_group=group,
        batch_size=_positive_int(opts, "batchSize", 1000, upper=4096) or 1000,
        credentials=parse_credentials(opts),
    )
