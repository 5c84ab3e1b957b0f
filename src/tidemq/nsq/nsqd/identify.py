"""IDENTIFY negotiation (docs/protocols/nsq-tcp.md#identify-request,
docs/protocols/nsq-tcp.md#identify-response): validate what the client asks for, answer what it gets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from tidemq.nsq.nsqd.config import NsqdConfig
from tidemq.nsq.protocol import VERSION, NSQError

T = TypeVar("T")


@dataclass(slots=True)
class Negotiated:
    client_id: str
    hostname: str
    user_agent: str
    feature_negotiation: bool
    heartbeat_interval_ms: int
    output_buffer_size: int
    output_buffer_timeout_ms: int
    tls_v1: bool
    deflate: bool
    snappy: bool
    deflate_level: int
    sample_rate: int
    msg_timeout_ms: int


def _decode_failed() -> NSQError:
    return NSQError("E_BAD_BODY", "IDENTIFY failed to decode JSON body")


def _field(data: dict[str, Any], key: str, kind: type[T], default: T) -> T:
    """Go's json.Unmarshal into nsqd's struct: a wrong type fails the decode, null keeps the default."""
    value = data.get(key)
    if value is None:
        return default
    if type(value) is not kind:  # exactly: JSON true is no number, 1.0 no integer
        raise _decode_failed()
    return value


def negotiate(body: bytes, cfg: NsqdConfig, remote_ip: str) -> Negotiated:
    """IDENTIFY's JSON body against nsqd's limits; every field is decoded (and type-checked) before any
    value is judged, as nsqd unmarshals first."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise _decode_failed() from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise _decode_failed()
    client_id = _field(data, "client_id", str, "")
    hostname = _field(data, "hostname", str, remote_ip)
    user_agent = _field(data, "user_agent", str, "")
    negotiation = _field(data, "feature_negotiation", bool, False)
    tls_v1 = _field(data, "tls_v1", bool, False)
    deflate = _field(data, "deflate", bool, False)
    snappy = _field(data, "snappy", bool, False)
    heartbeat = _field(data, "heartbeat_interval", int, 0)
    buffer_size = _field(data, "output_buffer_size", int, 0)
    buffer_timeout = _field(data, "output_buffer_timeout", int, 0)
    sample_rate = _field(data, "sample_rate", int, 0)
    msg_timeout = _field(data, "msg_timeout", int, 0)
    requested_level = _field(data, "deflate_level", int, 0)
    if heartbeat == 0:
        heartbeat = cfg.client_timeout_ms // 2
    elif heartbeat != -1 and not 1000 <= heartbeat <= cfg.max_heartbeat_interval_ms:
        raise NSQError("E_BAD_BODY", f"IDENTIFY heartbeat interval ({heartbeat}) is invalid")
    if buffer_timeout == 0:
        buffer_timeout = cfg.output_buffer_timeout_ms
    elif (
        buffer_timeout != -1
        and not cfg.min_output_buffer_timeout_ms <= buffer_timeout <= cfg.max_output_buffer_timeout_ms
    ):
        raise NSQError("E_BAD_BODY", f"IDENTIFY output buffer timeout ({buffer_timeout}) is invalid")
    if buffer_size == 0:
        buffer_size = 16384
    elif buffer_size != -1 and not 64 <= buffer_size <= cfg.max_output_buffer_size:
        raise NSQError("E_BAD_BODY", f"IDENTIFY output buffer size ({buffer_size}) is invalid")
    if not 0 <= sample_rate <= 99:
        raise NSQError("E_BAD_BODY", f"IDENTIFY sample rate ({sample_rate}) is invalid")
    if msg_timeout == 0:
        msg_timeout = cfg.msg_timeout_ms
    elif not 1000 <= msg_timeout <= cfg.max_msg_timeout_ms:
        raise NSQError("E_BAD_BODY", f"IDENTIFY msg timeout ({msg_timeout}) is invalid")
    tls_v1 = tls_v1 and negotiation and bool(cfg.tls_cert and cfg.tls_key)
    deflate = deflate and negotiation and cfg.deflate
    level = min(requested_level if deflate and requested_level > 0 else 6, cfg.max_deflate_level)
    snappy = snappy and negotiation and cfg.snappy
    if snappy and deflate:
        raise NSQError("E_IDENTIFY_FAILED", "cannot enable both deflate and snappy compression")
    return Negotiated(
        client_id=client_id,
        hostname=hostname,
        user_agent=user_agent,
        feature_negotiation=negotiation,
        heartbeat_interval_ms=heartbeat,
        output_buffer_size=buffer_size,
        output_buffer_timeout_ms=buffer_timeout,
        tls_v1=tls_v1,
        deflate=deflate,
        snappy=snappy,
        deflate_level=level,
        sample_rate=sample_rate,
        msg_timeout_ms=msg_timeout,
    )


def response(n: Negotiated, cfg: NsqdConfig, auth_required: bool) -> dict[str, Any]:
    """The JSON IDENTIFY answer, in nsqd's field order."""
    return {
        "max_rdy_count": cfg.max_rdy_count,
        "version": VERSION,
        "max_msg_timeout": cfg.max_msg_timeout_ms,
        "msg_timeout": n.msg_timeout_ms,
        "tls_v1": n.tls_v1,
        "deflate": n.deflate,
        "deflate_level": n.deflate_level,
        "max_deflate_level": cfg.max_deflate_level,
        "snappy": n.snappy,
        "sample_rate": n.sample_rate,
        "auth_required": auth_required,
        "output_buffer_size": n.output_buffer_size,
        "output_buffer_timeout": n.output_buffer_timeout_ms,
    }
