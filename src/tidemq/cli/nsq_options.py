"""The NSQ options ``tidemq server`` and ``tidemq nsqd`` share, under nsqd's own flag names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from tidemq.connection_gate import ConnectionLimits
from tidemq.nsq.client import parse_duration
from tidemq.nsq.nsqd.config import NsqdConfig, TLSRequired

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]
ANY_HOST = ("", "0.0.0.0", "::")
TLS_REQUIRED = {"false": TLSRequired.NO, "tcp-https": TLSRequired.EXCEPT_HTTP, "true": TLSRequired.YES}


def host_port(value: str, option: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port``, or ``:port`` for every interface."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise click.BadParameter(f"{value!r} is not HOST:PORT", param_hint=option)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host or "0.0.0.0", int(port)


def _percentiles(ctx: click.Context, param: click.Parameter, value: Any) -> list[float]:
    """nsqd's ``--e2e-processing-latency-percentile``: repeatable, each maybe comma separated (0.99,0.95),
    each in (0, 1]; a TOML config may give numbers."""
    found: list[float] = []
    for item in value or ():
        for part in str(item).split(","):
            try:
                quantile = float(part)
            except ValueError:
                raise click.BadParameter(f"{part.strip()!r} is not a number") from None
            if not 0 < quantile <= 1:
                raise click.BadParameter(f"{quantile:g} is not in (0, 1]")
            found.append(quantile)
    return found


def _window(ctx: click.Context, param: click.Parameter, value: Any) -> float:
    """A Go duration (10m, 90s) or, from a TOML config, a number of seconds; positive."""
    try:
        seconds = float(value) if isinstance(value, int | float) else parse_duration(str(value))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a duration (use e.g. 10m, 90s, 1h)") from None
    if seconds <= 0:
        raise click.BadParameter(f"{value!r} is not a positive duration")
    return seconds


def _idle_timeout(ctx: click.Context, param: click.Parameter, value: Any) -> float:
    """A Go duration or a number of seconds; 0 turns the timeout off."""
    try:
        seconds = float(value) if isinstance(value, int | float) else parse_duration(str(value))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a duration (use e.g. 60s, 5m; 0 for none)") from None
    if seconds < 0:
        raise click.BadParameter(f"{value!r} is negative")
    return seconds


def option_group(*options: Decorator) -> Decorator:
    """Several click options as one decorator; ``--help`` lists them in the order given."""

    def apply(f: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            f = option(f)
        return f

    return apply


#: The connection caps of every TCP port a command serves: remoting (name server, broker), NSQ TCP and
#: HTTP, nsqlookupd (docs/nsq-server.md#connection-limits, docs/rocketmq-broker.md#connection-limits).
connection_cap_options = option_group(
    click.option(
        "--max-connections-per-ip",
        type=click.IntRange(min=0),
        default=ConnectionLimits().max_connections_per_ip,
        show_default=True,
        help="Every port but gRPC: open connections from one IP, per port (0: no cap).",
    ),
    click.option(
        "--max-connections",
        type=click.IntRange(min=0),
        default=ConnectionLimits().max_connections,
        show_default=True,
        help="Every port: open connections in total, per port (0: no cap).",
    ),
)

#: The idle timeout of nsqd's HTTP port and nsqlookupd's ports, and the caps.
connection_limit_options = option_group(
    click.option(
        "--idle-timeout",
        default="60s",
        show_default=True,
        callback=_idle_timeout,
        metavar="DURATION",
        help="NSQ HTTP and lookupd ports: close a connection that sent nothing this long (0: never).",
    ),
    connection_cap_options,
)


def connection_caps(opts: dict[str, Any]) -> ConnectionLimits:
    """Take the connection cap options out of ``opts`` (for ports whose idle timeout is their own)."""
    return ConnectionLimits(
        max_connections_per_ip=opts.pop("max_connections_per_ip"),
        max_connections=opts.pop("max_connections"),
    )


def connection_limits(opts: dict[str, Any]) -> ConnectionLimits:
    """Take the connection limit options out of ``opts``."""
    caps = connection_caps(opts)
    return ConnectionLimits(
        idle_timeout_s=opts.pop("idle_timeout"),
        max_connections_per_ip=caps.max_connections_per_ip,
        max_connections=caps.max_connections,
    )


nsq_options = option_group(
    connection_limit_options,
    click.option(
        "--msg-timeout",
        "msg_timeout_ms",
        type=click.IntRange(min=1000),
        default=60_000,
        show_default=True,
        help="NSQ: in-flight timeout (ms).",
    ),
    click.option("--max-msg-size", type=click.IntRange(min=1), default=1_048_576, show_default=True),
    click.option("--max-body-size", type=click.IntRange(min=1), default=5_242_880, show_default=True),
    click.option("--max-rdy-count", type=click.IntRange(min=1), default=2500, show_default=True),
    click.option(
        "--mem-queue-size",
        type=click.IntRange(min=0),
        default=10_000,
        show_default=True,
        help="NSQ: new messages a channel holds in memory (an #ephemeral one drops the rest).",
    ),
    click.option(
        "--mem-queue-bytes",
        type=click.IntRange(min=0),
        default=16 * 1024 * 1024,
        show_default=True,
        help="NSQ: bytes of messages a channel holds in memory; the rest is read back from the store.",
    ),
    click.option(
        "--mem-queue-total-bytes",
        type=click.IntRange(min=0),
        default=256 * 1024 * 1024,
        show_default=True,
        help="NSQ: bytes of messages all channels together hold in memory.",
    ),
    click.option("--max-channel-consumers", type=click.IntRange(min=0), default=0, show_default=True),
    click.option(
        "--broadcast-address", default="", help="NSQ: address given to lookupd [default: hostname]."
    ),
    click.option(
        "--lookupd-tcp-address",
        "lookupd_tcp_addresses",
        multiple=True,
        help="NSQ: nsqlookupd TCP address to register with (repeatable).",
    ),
    click.option(
        "--auth-http-address",
        "auth_http_addresses",
        multiple=True,
        help="NSQ: auth server HOST:PORT or URL; enables AUTH (repeatable).",
    ),
    click.option("--tls-cert", default="", help="NSQ: certificate file; enables TLS."),
    click.option("--tls-key", default="", help="NSQ: private key file."),
    click.option("--tls-root-ca-file", default="", help="NSQ: CA to verify client certificates with."),
    click.option(
        "--tls-client-auth-policy", type=click.Choice(["", "require", "require-verify"]), default=""
    ),
    click.option("--tls-required", type=click.Choice(list(TLS_REQUIRED)), default="false", show_default=True),
    click.option("--snappy/--no-snappy", default=True, show_default=True),
    click.option("--deflate/--no-deflate", default=True, show_default=True),
    click.option("--max-deflate-level", type=click.IntRange(1, 9), default=6, show_default=True),
    click.option(
        "--e2e-processing-latency-percentile",
        "e2e_percentiles",
        multiple=True,
        callback=_percentiles,
        metavar="QUANTILE",
        help="NSQ: publish-to-FIN latency quantile in (0, 1] to report in /stats, e.g. 0.99 "
        "(repeatable or comma separated; default none).",
    ),
    click.option(
        "--e2e-processing-latency-window-time",
        "e2e_window_s",
        default="10m",
        show_default=True,
        callback=_window,
        metavar="DURATION",
        help="NSQ: how far back those quantiles look.",
    ),
)


def nsqd_config(host: str, tcp_port: int, http_port: int | None, opts: dict[str, Any]) -> NsqdConfig:
    """Take the NSQ options out of ``opts`` (what remains belongs to the other servers)."""
    return NsqdConfig(
        tcp_host=host,
        tcp_port=tcp_port,
        http_port=http_port,
        msg_timeout_ms=opts.pop("msg_timeout_ms"),
        max_msg_size=opts.pop("max_msg_size"),
        max_body_size=opts.pop("max_body_size"),
        max_rdy_count=opts.pop("max_rdy_count"),
        mem_queue_size=opts.pop("mem_queue_size"),
        mem_queue_bytes=opts.pop("mem_queue_bytes"),
        mem_queue_total_bytes=opts.pop("mem_queue_total_bytes"),
        max_channel_consumers=opts.pop("max_channel_consumers"),
        broadcast_address=opts.pop("broadcast_address") or (host if host not in ANY_HOST else ""),
        lookupd_tcp_addresses=[
            a for a in opts.pop("lookupd_tcp_addresses") if host_port(a, "--lookupd-tcp-address")
        ],
        auth_http_addresses=list(opts.pop("auth_http_addresses")),
        tls_cert=opts.pop("tls_cert"),
        tls_key=opts.pop("tls_key"),
        tls_root_ca_file=opts.pop("tls_root_ca_file"),
        tls_client_auth_policy=opts.pop("tls_client_auth_policy"),
        tls_required=TLS_REQUIRED[opts.pop("tls_required")],
        snappy=opts.pop("snappy"),
        deflate=opts.pop("deflate"),
        max_deflate_level=opts.pop("max_deflate_level"),
        e2e_processing_latency_percentiles=opts.pop("e2e_percentiles"),
        e2e_processing_latency_window_s=opts.pop("e2e_window_s"),
        connection_limits=connection_limits(opts),
    )
