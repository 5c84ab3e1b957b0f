"""``tidemq nsqlookupd``: the lookupd alone in the foreground, with nsqlookupd's flag names."""

from __future__ import annotations

from typing import Any

import click

from tidemq.address import LOCALHOST
from tidemq.cli.go_flags import GoFlagsCommand
from tidemq.cli.nsq_options import Decorator, connection_limit_options, connection_limits, host_port
from tidemq.cli.servers import config_option, run_plan
from tidemq.embedded import ServerPlan
from tidemq.nsq.client import parse_duration
from tidemq.nsq.lookupd import LookupdConfig


def _duration(ctx: click.Context, param: click.Parameter, value: Any) -> float:
    """Go duration text (or a number of seconds from a TOML config) to seconds."""
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        try:
            seconds = parse_duration(str(value))
        except ValueError as exc:
            raise click.BadParameter(f"{exc} (use e.g. 45s, 5m, 100ms, 1h30m)") from None
    if seconds < 0:
        raise click.BadParameter(f"{value!r} is negative")
    return seconds


def _duration_option(flag: str, default: str, help_text: str) -> Decorator:
    return click.option(
        flag,
        type=click.UNPROCESSED,
        metavar="DURATION",
        callback=_duration,
        default=default,
        show_default=True,
        help=help_text,
    )


def register(main: click.Group) -> None:
    @main.command("nsqlookupd", cls=GoFlagsCommand)
    @config_option()
    @click.option("--tcp-address", default=f"{LOCALHOST}:4160", show_default=True, help="HOST:PORT for nsqd.")
    @click.option(
        "--http-address", default=f"{LOCALHOST}:4161", show_default=True, help="HOST:PORT for HTTP."
    )
    @click.option(
        "--broadcast-address",
        default="",
        help="Address of this lookupd that nsqd is told about [default: the hostname].",
    )
    @_duration_option(
        "--inactive-producer-timeout",
        "300s",
        "Hide an nsqd from /lookup and /nodes this long after its last ping.",
    )
    @_duration_option(
        "--tombstone-lifetime", "45s", "How long a tombstoned producer stays hidden from /lookup."
    )
    @connection_limit_options
    def nsqlookupd(
        tcp_address: str,
        http_address: str,
        broadcast_address: str,
        inactive_producer_timeout: float,
        tombstone_lifetime: float,
        **opts: Any,
    ) -> None:
        """Run an nsqlookupd-compatible discovery server (foreground; Ctrl-C stops it)."""
        tcp_host, tcp_port = host_port(tcp_address, "--tcp-address")
        http_host, http_port = host_port(http_address, "--http-address")
        config = LookupdConfig(
            host=tcp_host,
            tcp_port=tcp_port,
            http_port=http_port,
            http_host=http_host,
            broadcast_address=broadcast_address,
            inactive_producer_timeout_s=inactive_producer_timeout,
            tombstone_lifetime_s=tombstone_lifetime,
            connection_limits=connection_limits(opts),
        )
        run_plan(ServerPlan(lookupd=config))
