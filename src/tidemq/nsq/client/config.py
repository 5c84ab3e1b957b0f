"""Client options: go-nsq's ``Config`` (docs/protocols/nsq-client.md#config) with its names, defaults and
ranges.

Durations are float seconds. ``Config.set`` takes go-nsq's option names (``-`` or ``_``) and coerces values
the way go-nsq's ``Config.Set`` does: durations from Go duration strings (``"250ms"``, ``"1m30s"``), from ints
(milliseconds) or from ``timedelta``; booleans from ``"true"``/``"1"``/ints; numbers from strings.
"""

from __future__ import annotations

import dataclasses
import re
import socket
import ssl
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from tidemq.nsq.client.errors import ConfigError

USER_AGENT = "tidemq/0.1.0"
BACKOFF_STRATEGIES = ("exponential", "full_jitter")
_TLS_VERSIONS = {
    "tls1.0": ssl.TLSVersion.TLSv1,
    "tls1.1": ssl.TLSVersion.TLSv1_1,
    "tls1.2": ssl.TLSVersion.TLSv1_2,
    "tls1.3": ssl.TLSVersion.TLSv1_3,
}


def _hostname() -> str:
    return socket.gethostname()


def _short_hostname() -> str:
    return socket.gethostname().split(".")[0]


@dataclass(slots=True)
class Config:
    """Options shared by ``Consumer`` and ``Producer``; validated on creation and by ``validate()``."""

    dial_timeout: float = 1.0
    read_timeout: float = 60.0
    write_timeout: float = 1.0
    #: Local address to dial from: ``"host"`` or ``"host:port"``.
    local_addr: str | None = None
    #: Also the reconnect delay for nsqd addresses given directly (no lookupd).
    lookupd_poll_interval: float = 60.0
    lookupd_poll_jitter: float = 0.3
    lookupd_poll_timeout: float = 60.0
    max_requeue_delay: float = 900.0
    default_requeue_delay: float = 90.0
    backoff_strategy: str = "exponential"
    #: 0 disables backoff.
    max_backoff_duration: float = 120.0
    backoff_multiplier: float = 1.0
    #: 0 means unlimited.
    max_attempts: int = 5
    low_rdy_idle_timeout: float = 10.0
    low_rdy_timeout: float = 30.0
    rdy_redistribute_interval: float = 5.0
    client_id: str = field(default_factory=_short_hostname)
    hostname: str = field(default_factory=_hostname)
    user_agent: str = USER_AGENT
    topology_region: str = ""
    topology_zone: str = ""
    #: Negative disables heartbeats (sent as -1); consumers cannot SUB without them.
    heartbeat_interval: float = 30.0
    sample_rate: int = 0
    tls_v1: bool = False
    #: A ready ``SSLContext``; when None one is built from the ``tls_*`` options below.
    tls_config: ssl.SSLContext | None = None
    tls_root_ca_file: str = ""
    tls_insecure_skip_verify: bool = False
    tls_cert: str = ""
    tls_key: str = ""
    #: ``tls1.0`` .. ``tls1.3``; empty keeps Python's default minimum.
    tls_min_version: str = ""
    deflate: bool = False
    deflate_level: int = 6
    snappy: bool = False
    output_buffer_size: int = 16384
    #: Negative disables nsqd's timed flush (sent as -1).
    output_buffer_timeout: float = 0.25
    max_in_flight: int = 1
    #: 0 uses nsqd's default.
    msg_timeout: float = 0.0
    #: 0 means no client-side limit beyond a sane frame bound.
    max_msg_size: int = 0
    auth_secret: str = ""
    #: go-nsq's ``LookupdAuthorization`` (option ``skip_lookupd_authorization``, despite the name): when
    #: true and ``auth_secret`` is set, lookupd queries carry ``Authorization: Bearer <secret>``.
    lookupd_authorization: bool = True

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        for name, (kind, low, high) in _SPECS.items():
            value = getattr(self, name)
            _check_type(name, kind, value)
            _check_range(name, value, low, high)
        if self.backoff_strategy not in BACKOFF_STRATEGIES:
            raise ConfigError(f"invalid backoff_strategy {self.backoff_strategy!r}: use {BACKOFF_STRATEGIES}")
        if self.heartbeat_interval > self.read_timeout:
            raise ConfigError(
                f"heartbeat_interval {self.heartbeat_interval}s must be less than read_timeout "
                f"{self.read_timeout}s"
            )
        if self.deflate and self.snappy:
            raise ConfigError("cannot enable both deflate and snappy compression")
        if self.tls_min_version and self.tls_min_version not in _TLS_VERSIONS:
            raise ConfigError(f"invalid tls_min_version {self.tls_min_version!r}: use {list(_TLS_VERSIONS)}")

    def set(self, option: str, value: Any) -> None:
        """go-nsq's ``Config.Set``: coerce, range-check, assign; unknown names are an error."""
        name = option.replace("-", "_")
        if name == "skip_lookupd_authorization":
            name = "lookupd_authorization"
        spec = _SPECS.get(name)
        if spec is None:
            raise ConfigError(f"invalid option {option}")
        kind, low, high = spec
        try:
            coerced = _COERCE[kind](value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"failed to coerce option {option} ({value!r}) - {exc}") from None
        if name == "backoff_strategy" and coerced not in BACKOFF_STRATEGIES:
            raise ConfigError(f"invalid backoff_strategy {coerced!r}: use {BACKOFF_STRATEGIES}")
        _check_range(name, coerced, low, high)
        setattr(self, name, coerced)

    def copy(self, **overrides: Any) -> Config:
        """A validated copy with ``overrides`` (field names; durations in seconds or as Go strings)."""
        unknown = set(overrides) - set(_SPECS)
        if unknown:
            raise ConfigError(f"invalid option(s) {sorted(unknown)}")
        typed: dict[str, Any] = {}
        for name, value in overrides.items():
            kind = _SPECS[name][0]
            if kind == "duration" and isinstance(value, int | float) and not isinstance(value, bool):
                typed[name] = float(value)
                continue
            try:
                typed[name] = _COERCE[kind](value)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"invalid {name} ({value!r}) - {exc}") from None
        return dataclasses.replace(self, **typed)

    def ssl_context(self) -> ssl.SSLContext:
        """``tls_config`` if given, else a client context from the ``tls_*`` helper options."""
        if self.tls_config is not None:
            return self.tls_config
        ctx = ssl.create_default_context(cafile=self.tls_root_ca_file or None)
        if self.tls_insecure_skip_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.tls_cert or self.tls_key:
            if not (self.tls_cert and self.tls_key):
                raise ConfigError("tls_cert and tls_key must be given together")
            ctx.load_cert_chain(self.tls_cert, self.tls_key)
        if self.tls_min_version:
            ctx.minimum_version = _TLS_VERSIONS[self.tls_min_version]
        return ctx


# --- coercion (go-nsq's coerce*) ------------------------------------------------------------------------

_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def parse_duration(text: str) -> float:
    """Go's ``time.ParseDuration`` in seconds: ``"250ms"``, ``"1m30s"``, ``"-1.5h"``, ``"0"``."""
    s = text.strip()
    sign = 1.0
    if s[:1] in ("+", "-"):
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError(f"invalid duration {text!r}")
    pos = 0
    total = 0.0
    while pos < len(s):
        match = _DURATION_PART.match(s, pos)
        if match is None:
            raise ValueError(f"invalid duration {text!r}")
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    return sign * total


def _to_duration(value: Any) -> float:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, str):
        return parse_duration(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("a duration is a Go duration string, an int of milliseconds or a timedelta")
    return value / 1000.0


_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value != 0
    if isinstance(value, str):
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        raise ValueError(f"invalid boolean {value!r}")
    raise TypeError("invalid value type")


def _to_int(value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError("invalid value type")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return int(value, 10)
    raise TypeError("invalid value type")


def _to_float(value: Any) -> float:
    if isinstance(value, bool):
        raise TypeError("invalid value type")
    if isinstance(value, int | float | str):
        return float(value)
    raise TypeError("invalid value type")


def _to_str(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise TypeError("invalid value type")


def _to_optional_str(value: Any) -> str | None:
    return None if value is None else _to_str(value)


def _to_ssl_context(value: Any) -> ssl.SSLContext | None:
    if value is None or isinstance(value, ssl.SSLContext):
        return value
    raise TypeError("tls_config must be an ssl.SSLContext")


_COERCE: dict[str, Any] = {
    "duration": _to_duration,
    "bool": _to_bool,
    "int": _to_int,
    "float": _to_float,
    "str": _to_str,
    "optstr": _to_optional_str,
    "ssl": _to_ssl_context,
}

_MIN = 60.0
# name -> (kind, min, max); ranges are go-nsq's struct tags
_SPECS: dict[str, tuple[str, float | None, float | None]] = {
    "dial_timeout": ("duration", None, None),
    "read_timeout": ("duration", 0.1, 5 * _MIN),
    "write_timeout": ("duration", 0.1, 5 * _MIN),
    "local_addr": ("optstr", None, None),
    "lookupd_poll_interval": ("duration", 0.01, 5 * _MIN),
    "lookupd_poll_jitter": ("float", 0.0, 1.0),
    "lookupd_poll_timeout": ("duration", None, None),
    "max_requeue_delay": ("duration", 0.0, 60 * _MIN),
    "default_requeue_delay": ("duration", 0.0, 60 * _MIN),
    "backoff_strategy": ("str", None, None),
    "max_backoff_duration": ("duration", 0.0, 60 * _MIN),
    "backoff_multiplier": ("duration", 0.0, 60 * _MIN),
    "max_attempts": ("int", 0, 65535),
    "low_rdy_idle_timeout": ("duration", 1.0, 5 * _MIN),
    "low_rdy_timeout": ("duration", 1.0, 5 * _MIN),
    "rdy_redistribute_interval": ("duration", 0.001, 5.0),
    "client_id": ("str", None, None),
    "hostname": ("str", None, None),
    "user_agent": ("str", None, None),
    "topology_region": ("str", None, None),
    "topology_zone": ("str", None, None),
    "heartbeat_interval": ("duration", None, None),
    "sample_rate": ("int", 0, 99),
    "tls_v1": ("bool", None, None),
    "tls_config": ("ssl", None, None),
    "tls_root_ca_file": ("str", None, None),
    "tls_insecure_skip_verify": ("bool", None, None),
    "tls_cert": ("str", None, None),
    "tls_key": ("str", None, None),
    "tls_min_version": ("str", None, None),
    "deflate": ("bool", None, None),
    "deflate_level": ("int", 1, 9),
    "snappy": ("bool", None, None),
    "output_buffer_size": ("int", None, None),
    "output_buffer_timeout": ("duration", None, None),
    "max_in_flight": ("int", 0, None),
    "msg_timeout": ("duration", 0.0, None),
    "max_msg_size": ("int", 0, None),
    "auth_secret": ("str", None, None),
    "lookupd_authorization": ("bool", None, None),
}


_TYPES: dict[str, tuple[type, ...]] = {
    "duration": (int, float),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "str": (str,),
    "optstr": (str, type(None)),
    "ssl": (ssl.SSLContext, type(None)),
}


def _check_type(name: str, kind: str, value: Any) -> None:
    expected = _TYPES[kind]
    if not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected):
        raise ConfigError(f"invalid {name} {value!r}: expected {' or '.join(t.__name__ for t in expected)}")


def _check_range(name: str, value: Any, low: float | None, high: float | None) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return
    if low is not None and value < low:
        raise ConfigError(f"invalid {name} ! {value} < {low}")
    if high is not None and value > high:
        raise ConfigError(f"invalid {name} ! {value} > {high}")


def requeue_delay(config: Config, attempts: int) -> float:
    """go-nsq's default requeue delay: ``default_requeue_delay x attempts``, capped at the maximum."""
    return min(config.default_requeue_delay * attempts, config.max_requeue_delay)


def backoff_duration(config: Config, level: int, rng_random: float) -> float:
    """Backoff for ``level`` (before the ``max_backoff_duration`` cap); ``rng_random`` in [0, 1)."""
    full = config.backoff_multiplier * 2.0**level
    if config.backoff_strategy == "full_jitter":
        return full * rng_random
    return full
