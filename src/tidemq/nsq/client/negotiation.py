"""What a client tells nsqd in IDENTIFY and what nsqd answers to IDENTIFY and AUTH
(docs/protocols/nsq-tcp.md#identify-response, docs/protocols/nsq-tcp.md#auth).

Plain data and its (de)serialisation, kept apart from the connection that sends and awaits it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from tidemq.nsq.client.config import Config
from tidemq.nsq.client.errors import NSQClientError


def _ms(seconds: float) -> int:
    return -1 if seconds < 0 else round(seconds * 1000)


def identify_body(config: Config) -> bytes:
    """The IDENTIFY JSON: the client's identity and the features it asks for; durations in milliseconds."""
    c = config
    return orjson.dumps(
        {
            "client_id": c.client_id,
            "hostname": c.hostname,
            "user_agent": c.user_agent,
            "short_id": c.client_id,
            "long_id": c.hostname,
            "tls_v1": c.tls_v1,
            "deflate": c.deflate,
            "deflate_level": c.deflate_level,
            "snappy": c.snappy,
            "feature_negotiation": True,
            "heartbeat_interval": _ms(c.heartbeat_interval),
            "sample_rate": c.sample_rate,
            "output_buffer_size": c.output_buffer_size,
            "output_buffer_timeout": _ms(c.output_buffer_timeout),
            "msg_timeout": _ms(c.msg_timeout),
            "topology_region": c.topology_region,
            "topology_zone": c.topology_zone,
        }
    )


@dataclass(frozen=True, slots=True)
class IdentifyResponse:
    """nsqd's answer to IDENTIFY with feature negotiation (docs/protocols/nsq-tcp.md#identify-response)."""

    max_rdy_count: int = 2500
    version: str = ""
    max_msg_timeout: int = 0
    msg_timeout: int = 0
    tls_v1: bool = False
    deflate: bool = False
    deflate_level: int = 0
    snappy: bool = False
    sample_rate: int = 0
    auth_required: bool = False
    output_buffer_size: int = 0
    output_buffer_timeout: int = 0
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, data: bytes) -> IdentifyResponse:
        try:
            raw = orjson.loads(data)
            if not isinstance(raw, dict):
                raise TypeError("not an object")
            return cls(
                max_rdy_count=int(raw.get("max_rdy_count", 2500)),
                version=str(raw.get("version", "")),
                max_msg_timeout=int(raw.get("max_msg_timeout", 0)),
                msg_timeout=int(raw.get("msg_timeout", 0)),
                tls_v1=bool(raw.get("tls_v1", False)),
                deflate=bool(raw.get("deflate", False)),
                deflate_level=int(raw.get("deflate_level", 0)),
                snappy=bool(raw.get("snappy", False)),
                sample_rate=int(raw.get("sample_rate", 0)),
                auth_required=bool(raw.get("auth_required", False)),
                output_buffer_size=int(raw.get("output_buffer_size", 0)),
                output_buffer_timeout=int(raw.get("output_buffer_timeout", 0)),
                raw=raw,
            )
        except (TypeError, ValueError) as exc:  # orjson.JSONDecodeError is a ValueError
            raise NSQClientError(f"invalid IDENTIFY response {data[:200]!r}: {exc}") from None


@dataclass(frozen=True, slots=True)
class AuthResponse:
    """nsqd's answer to AUTH: who the auth server says the secret belongs to
    (docs/protocols/nsq-tcp.md#auth)."""

    identity: str
    identity_url: str
    permission_count: int

    @classmethod
    def parse(cls, data: bytes) -> AuthResponse:
        try:
            raw = orjson.loads(data)
            return cls(
                str(raw.get("identity", "")),
                str(raw.get("identity_url", "")),
                int(raw.get("permission_count", 0)),
            )
        except (AttributeError, TypeError, ValueError):
            raise NSQClientError(f"invalid AUTH response {data[:200]!r}") from None
