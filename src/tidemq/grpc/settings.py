"""The server's answer to a client's Telemetry settings (Java proxy GrpcClientSettingsManager): the
client's own settings with the server's backoff policy, limits and, for a consumer, the group's FIFO flag.

Defaults are the proxy's ProxyConfig defaults; the consumer backoff is a group's default customized retry
policy (1s 5s 10s 30s 1m ... 2h) with ``retry_max_times + 1`` attempts.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.duration_pb2 import Duration

from tidemq.grpc.proto import definition_pb2 as pb

#: CustomizedRetryPolicy's default ``next``, in seconds (the delay levels from 1s on).
GROUP_BACKOFF_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """What the server imposes (ProxyConfig's names and defaults)."""

    max_message_size: int = 4 * 1024 * 1024
    producer_max_attempts: int = 3
    producer_backoff_initial_ms: int = 10
    producer_backoff_max_ms: int = 1000
    producer_backoff_multiplier: float = 2.0
    validate_message_type: bool = True
    receive_batch_size: int = 32
    long_polling_timeout_ms: int = 20_000


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """The consumer group facts a consumer's settings carry."""

    fifo: bool = False
    retry_max_times: int = 16


def _millis(ms: int) -> Duration:
    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def merged_settings(client: pb.Settings, server: ServerSettings, group: GroupSettings | None) -> pb.Settings:
    """The settings to send back: a producer's get the producer backoff and publishing limits, a
    consumer's the receive batch, long-polling timeout, FIFO flag and the group's retry policy."""
    out = pb.Settings()
    out.CopyFrom(client)
    if client.HasField("publishing"):
        policy = out.backoff_policy
        policy.max_attempts = server.producer_max_attempts
        policy.exponential_backoff.initial.CopyFrom(_millis(server.producer_backoff_initial_ms))
        policy.exponential_backoff.max.CopyFrom(_millis(server.producer_backoff_max_ms))
        policy.exponential_backoff.multiplier = server.producer_backoff_multiplier
        out.publishing.validate_message_type = server.validate_message_type
        out.publishing.max_body_size = server.max_message_size
    elif client.HasField("subscription"):
        group = group or GroupSettings()
        sub = out.subscription
        sub.receive_batch_size = server.receive_batch_size
        sub.long_polling_timeout.CopyFrom(_millis(server.long_polling_timeout_ms))
        sub.fifo = group.fifo
        out.backoff_policy.max_attempts = group.retry_max_times + 1
        backoff = out.backoff_policy.customized_backoff
        del backoff.next[:]
        backoff.next.extend(_millis(s * 1000) for s in GROUP_BACKOFF_S)
    out.metric.on = False
    return out
