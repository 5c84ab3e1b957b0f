"""``tidemq server``, ``tidemq namesrv``, ``tidemq broker``: run the servers in the foreground."""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from tidemq.broker.config import BrokerConfig, parse_delay_levels
from tidemq.embedded import ServerPlan, serve
from tidemq.nsq.config import NsqdConfig
from tidemq.store import FlushMode, StoreConfig, StoreError

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def _config_option() -> Decorator:
    from tidemq.cli import load_config_file

    return click.option(
        "--config",
        type=click.Path(dir_okay=False),
        callback=load_config_file,
        is_eager=True,
        expose_value=False,
        help="TOML file of option values (command line wins).",
    )


def _store_options(f: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option(
            "--data-dir",
            type=click.Path(file_okay=False, path_type=Path),
            default=Path("tidemq-data"),
            show_default=True,
            help="Where the log, queues and metadata live.",
        ),
        click.option(
            "--flush",
            type=click.Choice(["async", "sync"]),
            default="async",
            show_default=True,
            help="sync: a send is acknowledged only after fsync.",
        ),
        click.option(
            "--segment-size",
            type=click.IntRange(min=64 * 1024),
            default=1024**3,
            show_default=True,
            help="Commit-log segment size in bytes.",
        ),
        click.option(
            "--retention-hours",
            type=click.FloatRange(min=0, min_open=True),
            default=72.0,
            show_default=True,
            help="Delete whole segments older than this.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _broker_options(f: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--broker-port", type=click.IntRange(0, 65535), default=10911, show_default=True),
        click.option("--broker-name", default="broker-a", show_default=True),
        click.option("--cluster", default="DefaultCluster", show_default=True),
        click.option(
            "--advertise", default=None, help="Host clients use to reach the broker [default: --listen]."
        ),
        click.option("--auto-create-topic/--no-auto-create-topic", default=True, show_default=True),
        click.option(
            "--max-message-size", type=click.IntRange(min=1), default=4 * 1024 * 1024, show_default=True
        ),
        click.option("--delay-levels", default=None, help='Delay levels, e.g. "1s 5s 10s 30s 1m".'),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _store_config(data_dir: Path, flush: str, segment_size: int, retention_hours: float) -> StoreConfig:
    return StoreConfig(
        data_dir, segment_bytes=segment_size, flush_mode=FlushMode(flush), file_reserved_hours=retention_hours
    )


def _broker_config(listen: str, namesrv: list[str], opts: dict[str, Any]) -> BrokerConfig:
    config = BrokerConfig(
        broker_name=opts["broker_name"],
        cluster_name=opts["cluster"],
        listen_host=listen,
        port=opts["broker_port"],
        advertised_host=opts["advertise"],
        namesrv_addrs=namesrv,
        auto_create_topic=opts["auto_create_topic"],
        max_message_size=opts["max_message_size"],
    )
    if opts["delay_levels"]:
        try:
            parse_delay_levels(opts["delay_levels"])
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--delay-levels") from None
        config.message_delay_levels = opts["delay_levels"]
    return config


def _run(plan: ServerPlan) -> None:
    plan.on_ready = lambda parts: click.echo("tidemq ready: " + ", ".join(parts), err=False)
    try:
        asyncio.run(serve(plan))
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise click.ClickException(f"address already in use: {exc.strerror} ({_ports(plan)})") from None
        if exc.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
            raise click.ClickException(f"permission denied: {exc}") from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise click.ClickException(f"cannot listen on that address: {exc.strerror}") from None
        raise click.ClickException(str(exc)) from None


def _ports(plan: ServerPlan) -> str:
    parts = []
    if plan.namesrv_host is not None:
        parts.append(f"namesrv {plan.namesrv_host}:{plan.namesrv_port}")
    if plan.broker is not None:
        parts.append(f"broker {plan.broker.listen_host}:{plan.broker.port}")
    if plan.nsqd is not None:
        parts.append(f"nsqd {plan.nsqd.tcp_host}:{plan.nsqd.tcp_port}")
    return ", ".join(parts)


def _nsq_options(f: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--nsqd-tcp-port", type=click.IntRange(0, 65535), default=4150, show_default=True),
        click.option(
            "--msg-timeout",
            "msg_timeout_ms",
            type=click.IntRange(min=1000),
            default=60_000,
            show_default=True,
            help="NSQ in-flight timeout (ms).",
        ),
        click.option(
            "--max-msg-size",
            type=click.IntRange(min=1),
            default=1_048_576,
            show_default=True,
            help="NSQ max message body.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _nsqd_config(listen: str, opts: dict[str, Any]) -> NsqdConfig:
    """Take the NSQ options out of ``opts`` (they are not the broker's)."""
    return NsqdConfig(
        tcp_host=listen,
        tcp_port=opts.pop("nsqd_tcp_port"),
        msg_timeout_ms=opts.pop("msg_timeout_ms"),
        max_msg_size=opts.pop("max_msg_size"),
    )


listen_option = click.option("--listen", default="127.0.0.1", show_default=True, help="Address to listen on.")
namesrv_port_option = click.option(
    "--namesrv-port", type=click.IntRange(0, 65535), default=9876, show_default=True
)


def register(main: click.Group) -> None:
    @main.command()
    @_config_option()
    @listen_option
    @namesrv_port_option
    @_broker_options
    @_store_options
    @_nsq_options
    @click.option("--no-nsq", is_flag=True, help="Do not serve the NSQ protocol.")
    def server(
        listen: str,
        namesrv_port: int,
        data_dir: Path,
        flush: str,
        segment_size: int,
        retention_hours: float,
        no_nsq: bool,
        **opts: Any,
    ) -> None:
        """Run a name server, a broker and an nsqd over one store (foreground; Ctrl-C stops it cleanly)."""
        store = _store_config(data_dir, flush, segment_size, retention_hours)
        nsqd = _nsqd_config(listen, opts)
        _run(
            ServerPlan(
                listen, namesrv_port, _broker_config(listen, [], opts), store, None if no_nsq else nsqd
            )
        )

    @main.command()
    @_config_option()
    @listen_option
    @_store_options
    @_nsq_options
    def nsqd(
        listen: str, data_dir: Path, flush: str, segment_size: int, retention_hours: float, **opts: Any
    ) -> None:
        """Run an nsqd-compatible server alone (its own store under --data-dir)."""
        store = _store_config(data_dir, flush, segment_size, retention_hours)
        _run(ServerPlan(None, 0, None, store, _nsqd_config(listen, opts)))

    @main.command()
    @_config_option()
    @listen_option
    @namesrv_port_option
    def namesrv(listen: str, namesrv_port: int) -> None:
        """Run a name server alone."""
        _run(ServerPlan(listen, namesrv_port))

    @main.command()
    @_config_option()
    @listen_option
    @click.option(
        "--namesrv", "namesrv_addr", required=True, help="HOST:PORT[;HOST:PORT...] of name servers."
    )
    @_broker_options
    @_store_options
    def broker(
        listen: str,
        namesrv_addr: str,
        data_dir: Path,
        flush: str,
        segment_size: int,
        retention_hours: float,
        **opts: Any,
    ) -> None:
        """Run a broker that registers with existing name servers."""
        addrs = [a.strip() for a in namesrv_addr.replace(",", ";").split(";") if a.strip()]
        for addr in addrs:
            host, _, port = addr.rpartition(":")
            if not host or not port.isdigit():
                raise click.BadParameter(f"{addr!r} is not HOST:PORT", param_hint="--namesrv")
        store = _store_config(data_dir, flush, segment_size, retention_hours)
        _run(ServerPlan(None, 0, _broker_config(listen, addrs, opts), store))
