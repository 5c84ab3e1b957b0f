"""Broker settings; names and defaults follow Apache RocketMQ's BrokerConfig where it has one."""

from __future__ import annotations

from dataclasses import dataclass, field

from tidemq.address import LOCALHOST
from tidemq.connection_gate import ConnectionLimits
from tidemq.store.message_store import MAX_TRANSFER_COUNT

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> list[int]:
    """``"1s 5s 1m"`` -> delays in ms, level 1 first."""
    out = []
    for item in text.split():
        unit = item[-1]
        if unit not in _UNITS or not item[:-1].isdigit():
            raise ValueError(f"bad delay level {item!r}: expected a number followed by one of s, m, h, d")
        out.append(int(item[:-1]) * _UNITS[unit])
    return out


@dataclass(slots=True)
class BrokerConfig:
    broker_name: str = "broker-a"
    cluster_name: str = "DefaultCluster"
    broker_id: int = 0
    listen_host: str = LOCALHOST
    port: int = 10911
    #: Address written into routes and message ids; clients connect to exactly this.
    advertised_host: str | None = None
    namesrv_addrs: list[str] = field(default_factory=list)
    auto_create_topic: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = 8
    max_message_size: int = 4 * 1024 * 1024
    #: Records one pull answers at most (Java maxTransferCountOnMessageInMemory); the store's 256 KiB cap
    #: per answer holds whatever this is. A reader that pulls a whole backlog (the Spark source) takes
    #: fewer round trips per message with more.
    max_transfer_count: int = MAX_TRANSFER_COUNT
    #: A new group's first query for a queue whose first message lies within this share (percent) of
    #: RAM behind the log's end is answered 0 (read the queue from its start), as Java does.
    access_message_in_memory_max_ratio: int = 40
    long_polling: bool = True
    short_polling_ms: int = 1000
    register_interval_s: float = 30.0
    channel_expiry_s: float = 120.0
    lock_max_live_s: float = 60.0
    idle_timeout_s: float = 120.0
    #: Connection caps of the remoting port (its idle timeout is ``idle_timeout_s``, Java's
    #: serverChannelMaxIdleTimeSeconds); docs/rocketmq-broker.md#connection-limits.
    connection_limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    #: A client that reads none of its answers this long is closed (tidemq's; Netty has no such deadline).
    slow_peer_timeout_s: float = 120.0
    message_delay_levels: str = DEFAULT_DELAY_LEVELS
    region: str = "DefaultRegion"
    trace_on: bool = True
    writable: bool = True
    #: A half message younger than this (from its birth) is not checked yet (Java transactionTimeOut).
    transaction_timeout_s: float = 6.0
    #: How often undecided half messages are scanned for a check (Java transactionCheckInterval).
    transaction_check_interval_s: float = 60.0
    #: Checks of one transaction before its half message is discarded (Java transactionCheckMax).
    transaction_check_max: int = 15
    readable: bool = True
    #: Keep replies in ``<cluster>_REPLY_TOPIC`` as well as pushing them (Java storeReplyMessageEnable).
    store_reply_message: bool = True
    #: A timer message due further ahead than this is refused (Java timerMaxDelaySec, 3 days).
    timer_max_delay_s: int = 3 * 86_400
    #: Java's plain_acl.yml; when set every request is checked against it (docs: rocketmq-remoting.md#acl).
    acl_file: str | None = None

    @property
    def advertised_addr(self) -> str:
        host = self.advertised_host or self.listen_host
        if host in ("0.0.0.0", "", "::"):
            host = LOCALHOST
        return f"{host}:{self.port}"

    @property
    def delay_levels_ms(self) -> list[int]:
        return parse_delay_levels(self.message_delay_levels)
