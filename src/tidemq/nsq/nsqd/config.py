"""nsqd settings: names and defaults of nsqd v1.3.0's flags (docs/protocols/nsq-nsqd.md#options)."""

from __future__ import annotations

import enum
import socket
from dataclasses import dataclass, field

from tidemq.address import LOCALHOST
from tidemq.connection_gate import ConnectionLimits

#: nsqd's log levels by name, and the numbers its JSON (``GET /config/log_level``) shows for them.
LOG_LEVEL_NUMBERS = {"debug": 1, "info": 2, "warn": 3, "error": 4, "fatal": 5}


class TLSRequired(enum.IntEnum):
    """nsqd's ``--tls-required``: 0 off, 1 for TCP but not HTTP (``tcp-https``), 2 everywhere."""

    NO = 0
    EXCEPT_HTTP = 1
    YES = 2


@dataclass(slots=True)
class NsqdConfig:
    tcp_host: str = LOCALHOST
    tcp_port: int = 4150
    #: None: no HTTP API.
    http_port: int | None = 4151
    #: What nsqd tells lookupd (and /info) to reach it by; empty means the host name, as nsqd does.
    broadcast_address: str = ""
    lookupd_tcp_addresses: list[str] = field(default_factory=list)
    msg_timeout_ms: int = 60_000
    max_msg_timeout_ms: int = 900_000
    max_msg_size: int = 1_048_576
    max_body_size: int = 5_242_880
    max_req_timeout_ms: int = 3_600_000
    client_timeout_ms: int = 60_000
    max_heartbeat_interval_ms: int = 60_000
    max_rdy_count: int = 2500
    max_output_buffer_size: int = 65_536
    output_buffer_timeout_ms: int = 250
    min_output_buffer_timeout_ms: int = 25
    max_output_buffer_timeout_ms: int = 30_000
    #: A client that stops reading is disconnected once this much is waiting to be written to it.
    max_pending_output_bytes: int = 16 * 1024 * 1024
    mem_queue_size: int = 10_000
    #: Bytes of bodies one channel holds in memory, and all channels together (tidemq's; nsqd bounds
    #: only the count): past them messages stay in the store and are read back (docs/nsq-server.md).
    mem_queue_bytes: int = 16 * 1024 * 1024
    mem_queue_total_bytes: int = 256 * 1024 * 1024
    deflate: bool = True
    snappy: bool = True
    max_deflate_level: int = 6
    max_channel_consumers: int = 0
    auth_http_addresses: list[str] = field(default_factory=list)
    auth_http_request_method: str = "get"
    #: The plain ACL's accounts file: AUTH is required and checked against it (when no auth server is set).
    acl_file: str | None = None
    http_client_connect_timeout_s: float = 2.0
    http_client_request_timeout_s: float = 5.0
    tls_cert: str = ""
    tls_key: str = ""
    tls_root_ca_file: str = ""
    #: "" (no client certificates), "require" or "require-verify" (checked against tls_root_ca_file).
    tls_client_auth_policy: str = ""
    tls_required: TLSRequired = TLSRequired.NO
    #: How often in-flight timeouts and deferred messages are checked.
    queue_scan_interval_ms: int = 50
    #: Quantiles in (0, 1] of the time from publish to FIN to report in /stats, per channel and topic
    #: (none: not tracked, as nsqd's default).
    e2e_processing_latency_percentiles: list[float] = field(default_factory=list)
    #: The window those quantiles cover (nsqd's --e2e-processing-latency-window-time, 10m).
    e2e_processing_latency_window_s: float = 600.0
    #: The HTTP port's idle timeout and connection caps (docs/nsq-server.md#connection-limits).
    connection_limits: ConnectionLimits = field(default_factory=ConnectionLimits)

    def __post_init__(self) -> None:
        for quantile in self.e2e_processing_latency_percentiles:
            if not 0 < quantile <= 1:
                raise ValueError(f"invalid E2E processing latency percentile: {quantile}")
        if self.e2e_processing_latency_window_s <= 0:
            raise ValueError("the E2E processing latency window must be positive")

    @property
    def broadcast_host(self) -> str:
        return self.broadcast_address or socket.gethostname()
