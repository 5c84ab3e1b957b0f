"""Typed command headers: dataclasses that round-trip through extFields (docs/protocols/rocketmq-remoting.md,
docs/protocols/rocketmq-consumption.md#offset-commands).

Attributes are snake_case; the wire name is the camelCase form unless a field names it explicitly
(``wire``). A field without a default is required: decoding fails with a message naming it.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Self

from tidemq.remoting.names import camel


class HeaderFieldError(ValueError):
    """A required extField is missing or does not parse as its Java type."""


#: A Java ``Long`` field; plain ``int`` fields are Java ``Integer`` and must fit in 32 bits.
Long = Annotated[int, "int64"]

#: Decimal digits that fit an Integer / a Long whatever they are.
_INT_SAFE_DIGITS, _LONG_SAFE_DIGITS = 9, 18


def wire(name: str, default: Any = dataclasses.MISSING) -> Any:
    return field(default=default, metadata={"wire": name})


@dataclass(frozen=True, slots=True)
class _FieldSpec:
    attr: str
    wire: str
    kind: type
    required: bool
    bits: int = 32
    #: Decimal digits that fit ``bits`` whatever they are.
    safe_digits: int = _INT_SAFE_DIGITS


_SPECS: dict[type, tuple[_FieldSpec, ...]] = {}


def _specs(cls: type) -> tuple[_FieldSpec, ...]:
    cached = _SPECS.get(cls)
    if cached is not None:
        return cached
    hints = typing.get_type_hints(cls, include_extras=True)
    specs = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        kinds = [t for t in typing.get_args(hint) if t is not type(None)] or [hint]
        if typing.get_origin(hint) is Annotated:
            kinds = [hint]
        kind, bits = kinds[0], 32
        if typing.get_origin(kind) is Annotated:
            kind, bits = typing.get_args(kind)[0], 64
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        wire_name = f.metadata.get("wire", camel(f.name))
        digits = _INT_SAFE_DIGITS if bits == 32 else _LONG_SAFE_DIGITS
        specs.append(_FieldSpec(f.name, wire_name, kind, required, bits, digits))
    _SPECS[cls] = result = tuple(specs)
    return result


_LOOKUPS: dict[tuple[type, bool], tuple[tuple[_FieldSpec, str, str | None], ...]] = {}


def _lookups(cls: type, compact: bool) -> tuple[tuple[_FieldSpec, str, str | None], ...]:
    """Each field with the ext key to read it from, and for a compact header (V2's a..n) the full name
    to read when the alias is absent: a broker decodes one per message sent, without remapping the dict."""
    cached = _LOOKUPS.get((cls, compact))
    if cached is not None:
        return cached
    by_wire = {wire: alias for alias, wire in getattr(cls, "aliases", {}).items()} if compact else {}
    result = tuple(
        (spec, by_wire[spec.wire], spec.wire) if spec.wire in by_wire else (spec, spec.wire, None)
        for spec in _specs(cls)
    )
    _LOOKUPS[(cls, compact)] = result
    return result


def _parse(spec: _FieldSpec, raw: str) -> Any:
    if spec.kind is str:
        return raw
    if spec.kind is bool:
        return raw.lower() == "true"  # Boolean.parseBoolean: no trimming
    # Integer.parseInt / Long.parseLong: no surrounding whitespace, no '_' separators, 64 bits at most
    try:
        if "_" in raw or raw != raw.strip():
            raise ValueError(raw)
        value = int(raw)
        limit = 1 << (spec.bits - 1)
        if not -limit <= value < limit:
            raise ValueError(raw)
    except ValueError:
        kind = "long" if spec.bits == 64 else "32-bit integer"
        raise HeaderFieldError(f"field {spec.wire!r} must be a {kind}, got {raw!r}") from None
    return value


class CommandHeader:
    """Base of every typed header; ``aliases`` maps alternative wire names (SEND_MESSAGE_V2's a..n)."""

    aliases: ClassVar[dict[str, str]] = {}

    @classmethod
    def from_ext(cls, ext: dict[str, str], *, compact: bool = False) -> Self:
        values: dict[str, Any] = {}
        for spec, first, second in _lookups(cls, compact and bool(cls.aliases)):
            raw = ext.get(first)
            if raw is None and second is not None:
                raw = ext.get(second)
            kind = spec.kind
            if not raw:
                if raw is None or kind is not str:
                    if spec.required:
                        raise HeaderFieldError(f"missing required field {spec.wire!r}")
                    continue
                if not spec.required:
                    continue  # Go sends empty strings for absent optional fields
                    # (docs/protocols/rocketmq-remoting.md#custom-headers)
                values[spec.attr] = raw
            elif kind is str:
                values[spec.attr] = raw
            elif kind is int and raw.isdecimal() and len(raw) <= spec.safe_digits:
                values[spec.attr] = int(raw)  # the common number: in range, nothing for _parse to refuse
            else:
                values[spec.attr] = _parse(spec, raw)
        return cls(**values)

    def to_ext(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for spec in _specs(type(self)):
            value = getattr(self, spec.attr)
            if value is None:
                continue
            if isinstance(value, bool):
                out[spec.wire] = "true" if value else "false"
            else:
                out[spec.wire] = str(value)
        return out


# --- name server -------------------------------------------------------------------------------


@dataclass(slots=True)
class GetRouteInfoRequestHeader(CommandHeader):
    topic: str
    accept_standard_json_only: bool | None = None


@dataclass(slots=True)
class RegisterBrokerRequestHeader(CommandHeader):
    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: Long
    compressed: bool = False
    body_crc32: int = 0


@dataclass(slots=True)
class UnregisterBrokerRequestHeader(CommandHeader):
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: Long


@dataclass(slots=True)
class TopicRequestHeader(CommandHeader):
    """Shared by commands that only name a topic (DELETE_TOPIC_*, GET_TOPIC_STATS_INFO)."""

    topic: str


# --- producer -----------------------------------------------------------------------------------


@dataclass(slots=True)
class SendMessageRequestHeader(CommandHeader):
    aliases: ClassVar[dict[str, str]] = {
        "a": "producerGroup",
        "b": "topic",
        "c": "defaultTopic",
        "d": "defaultTopicQueueNums",
        "e": "queueId",
        "f": "sysFlag",
        "g": "bornTimestamp",
        "h": "flag",
        "i": "properties",
        "j": "reconsumeTimes",
        "k": "unitMode",
        "l": "maxReconsumeTimes",
        "m": "batch",
        "n": "bname",
    }
    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: Long
    flag: int
    properties: str | None = None
    reconsume_times: int | None = None
    unit_mode: bool = False
    batch: bool = False
    max_reconsume_times: int | None = None
    bname: str | None = None

    @classmethod
    def from_compact_ext(cls, ext: dict[str, str]) -> SendMessageRequestHeader:
        """``from_ext(ext, compact=True)`` read field by field for the header clients send (a..n only,
        numbers in plain decimal): a broker decodes one per message sent, and the generic loop was a tenth
        of its CPU per single send. Anything else (a full field name, a sign, a long number, a missing
        field) takes the generic path, which reads it or says what is wrong."""
        get = ext.get
        group, topic, default_topic = get("a"), get("b"), get("c")
        queue_nums, queue_id, sys_flag, born, flag = get("d"), get("e"), get("f"), get("g"), get("h")
        reconsume, max_reconsume = get("j") or "", get("l") or ""
        if (
            group is None
            or topic is None
            or default_topic is None
            or not (queue_nums and queue_id and sys_flag and born and flag)
            or not born.isdecimal()
            or len(born) > _LONG_SAFE_DIGITS
            or not ext.keys().isdisjoint(_SEND_FULL_NAMES)
        ):
            return cls.from_ext(ext, compact=True)
        integers = (queue_nums, queue_id, sys_flag, flag, reconsume, max_reconsume)
        digits = "".join(integers)
        if not digits.isdecimal() or (
            len(digits) > _INT_SAFE_DIGITS and max(map(len, integers)) > _INT_SAFE_DIGITS
        ):
            return cls.from_ext(ext, compact=True)
        return cls(  # positional, as a dataclass's keywords cost more than the rest of this method
            group,
            topic,
            default_topic,
            int(queue_nums),
            int(queue_id),
            int(sys_flag),
            int(born),
            int(flag),
            get("i") or None,
            int(reconsume) if reconsume else None,
            (get("k") or "").lower() == "true",
            (get("m") or "").lower() == "true",
            int(max_reconsume) if max_reconsume else None,
            get("n") or None,
        )

    def to_compact_ext(self) -> dict[str, str]:
        """V2's a..n fields, the same as ``to_ext`` under the aliases, written out field by field: this
        runs for every message a producer sends, where the generic loop was a tenth of its CPU."""
        ext = {
            "a": self.producer_group,
            "b": self.topic,
            "c": self.default_topic,
            "d": str(self.default_topic_queue_nums),
            "e": str(self.queue_id),
            "f": str(self.sys_flag),
            "g": str(self.born_timestamp),
            "h": str(self.flag),
        }
        if self.properties is not None:
            ext["i"] = self.properties
        if self.reconsume_times is not None:
            ext["j"] = str(self.reconsume_times)
        ext["k"] = "true" if self.unit_mode else "false"
        if self.max_reconsume_times is not None:
            ext["l"] = str(self.max_reconsume_times)
        ext["m"] = "true" if self.batch else "false"
        if self.bname is not None:
            ext["n"] = self.bname
        return ext


#: SEND_MESSAGE_V2's full field names: a header holding any of them is read by the generic path, which
#: falls back to a full name where the alias is absent.
_SEND_FULL_NAMES = frozenset(SendMessageRequestHeader.aliases.values())


@dataclass(slots=True)
class SendMessageResponseHeader(CommandHeader):
    msg_id: str
    queue_id: int
    queue_offset: Long
    transaction_id: str | None = None


@dataclass(slots=True)
class EndTransactionRequestHeader(CommandHeader):
    """A producer's decision on a half message (Java EndTransactionRequestHeader); ``commit_or_rollback``
    is a transaction sys-flag value: 8 commit, 12 rollback, 0 not decided yet."""

    producer_group: str
    tran_state_table_offset: Long
    commit_log_offset: Long
    commit_or_rollback: int
    msg_id: str
    from_transaction_check: bool = False
    transaction_id: str | None = None


@dataclass(slots=True)
class CheckTransactionStateRequestHeader(CommandHeader):
    """The broker asking a producer for an undecided transaction's state (Java's header of that name)."""

    tran_state_table_offset: Long
    commit_log_offset: Long
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None


@dataclass(slots=True)
class ReplyMessageRequestHeader(CommandHeader):
    """PUSH_REPLY_MESSAGE_TO_CLIENT: the reply's send header, plus where it came from and when it was
    stored (docs/protocols/rocketmq-request-reply.md)."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: Long
    flag: int
    born_host: str
    store_host: str
    store_timestamp: Long
    properties: str | None = None
    reconsume_times: int | None = None
    unit_mode: bool = False


# --- client management ------------------------------------------------------------------------


@dataclass(slots=True)
class UnregisterClientRequestHeader(CommandHeader):
    client_id: str = wire("clientID")
    producer_group: str | None = None
    consumer_group: str | None = None


@dataclass(slots=True)
class ConsumerGroupRequestHeader(CommandHeader):
    """GET_CONSUMER_LIST_BY_GROUP, NOTIFY_CONSUMER_IDS_CHANGED, GET_CONSUMER_CONNECTION_LIST."""

    consumer_group: str


# --- consumer -----------------------------------------------------------------------------------


@dataclass(slots=True)
class PullMessageRequestHeader(CommandHeader):
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: Long
    max_msg_nums: int
    sys_flag: int
    commit_offset: Long
    suspend_timeout_millis: Long
    sub_version: Long
    subscription: str | None = None
    expression_type: str | None = None
    bname: str | None = None


@dataclass(slots=True)
class PullMessageResponseHeader(CommandHeader):
    suggest_which_broker_id: Long
    next_begin_offset: Long
    min_offset: Long
    max_offset: Long


@dataclass(slots=True)
class QueryConsumerOffsetRequestHeader(CommandHeader):
    consumer_group: str
    topic: str
    queue_id: int


@dataclass(slots=True)
class UpdateConsumerOffsetRequestHeader(CommandHeader):
    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: Long


@dataclass(slots=True)
class ConsumerSendMsgBackRequestHeader(CommandHeader):
    offset: Long
    group: str
    delay_level: int
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: int | None = None
    bname: str | None = None


@dataclass(slots=True)
class QueueRequestHeader(CommandHeader):
    """GET_MAX_OFFSET, GET_MIN_OFFSET, GET_EARLIEST_MSG_STORETIME."""

    topic: str
    queue_id: int


@dataclass(slots=True)
class SearchOffsetRequestHeader(CommandHeader):
    topic: str
    queue_id: int
    timestamp: Long


@dataclass(slots=True)
class ResetOffsetRequestHeader(CommandHeader):
    """INVOKE_BROKER_TO_RESET_OFFSET (admin to broker) and RESET_CONSUMER_CLIENT_OFFSET (broker to
    consumer). ``timestamp`` -1 means each queue's max offset (4.9.x Broker2Client)."""

    topic: str
    group: str
    timestamp: Long
    is_force: bool = False


# --- admin and query -----------------------------------------------------------------------------


@dataclass(slots=True)
class CreateTopicRequestHeader(CommandHeader):
    topic: str
    default_topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_filter_type: str = "SINGLE_TAG"
    order: bool = False
    topic_sys_flag: int | None = None


@dataclass(slots=True)
class ViewMessageRequestHeader(CommandHeader):
    offset: Long


@dataclass(slots=True)
class QueryMessageRequestHeader(CommandHeader):
    topic: str
    key: str
    max_num: int
    begin_timestamp: Long
    end_timestamp: Long


@dataclass(slots=True)
class GetConsumeStatsRequestHeader(CommandHeader):
    consumer_group: str
    topic: str | None = None
