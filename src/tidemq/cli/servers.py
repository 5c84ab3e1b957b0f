"""``tidemq server``, ``tidemq namesrv``, ``tidemq broker``: run the servers in the foreground."""

from __future__ import annotations

import asyncio
import errno
import faulthandler
import gc
import os
import socket
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from tidemq.acl import AclFileError, read_acl_file
from tidemq.address import LOCALHOST, is_host_port
from tidemq.broker.config import BrokerConfig, parse_delay_levels
from tidemq.cli.go_flags import GoFlagsCommand
from tidemq.cli.nsq_options import (
    Decorator,
    connection_cap_options,
    connection_caps,
    host_port,
    nsq_options,
    nsqd_config,
    option_group,
)
from tidemq.embedded import ServerPlan, serve
from tidemq.grpc.server import GrpcConfig
from tidemq.nsq.lookupd import LookupdConfig
from tidemq.ops import OpsConfig
from tidemq.store import FlushMode, StoreConfig, StoreError
from tidemq.store.message_store import MAX_TRANSFER_COUNT


def config_option() -> Decorator:
    from tidemq.cli import load_config_file

    return click.option(
        "--config",
        type=click.Path(dir_okay=False),
        callback=load_config_file,
        is_eager=True,
        expose_value=False,
        help="TOML file of option values (command line wins).",
    )


_store_options = option_group(
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
    click.option(
        "--retention-bytes",
        type=click.IntRange(min=0),
        default=0,
        show_default=True,
        help="Also delete the oldest whole segments while the log holds more than this (0: no cap).",
    ),
    click.option(
        "--disk-full-ratio",
        type=click.FloatRange(0, 1, min_open=True),
        default=0.90,
        show_default=True,
        help="Refuse writes while the disk is more than this share used (Java diskSpaceWarningLevelRatio); "
        "accepted again below 85 % used (or below the ratio itself when that is lower).",
    ),
)
_broker_options = option_group(
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
    click.option(
        "--max-transfer-count",
        type=click.IntRange(1, 4096),
        default=MAX_TRANSFER_COUNT,
        show_default=True,
        help="Messages one pull answers at most, within 256 KiB (Java maxTransferCountOnMessageInMemory); "
        "more means fewer round trips for readers of a whole backlog, e.g. Spark's pullBatchSize.",
    ),
    click.option("--delay-levels", default=None, help='Delay levels, e.g. "1s 5s 10s 30s 1m".'),
    click.option(
        "--access-message-in-memory-max-ratio",
        type=click.IntRange(0, 100),
        default=40,
        show_default=True,
        help="Percent of RAM behind the log's end counted as in memory: a new group starts a queue "
        "whose first message is still there from that message (Java's accessMessageInMemoryMaxRatio).",
    ),
    click.option(
        "--transaction-timeout",
        type=click.FloatRange(min=0),
        default=6.0,
        show_default=True,
        help="Seconds after its birth before an undecided half message is checked (Java transactionTimeOut).",
    ),
    click.option(
        "--transaction-check-interval",
        type=click.FloatRange(min=0, min_open=True),
        default=60.0,
        show_default=True,
        help="Seconds between scans for half messages to check (Java transactionCheckInterval).",
    ),
    click.option(
        "--transaction-check-max",
        type=click.IntRange(min=0),
        default=15,
        show_default=True,
        help="Checks of a transaction before its half message is discarded (Java transactionCheckMax).",
    ),
    click.option(
        "--timer-max-delay",
        type=click.IntRange(min=1),
        default=3 * 86_400,
        show_default=True,
        help="Seconds ahead a timer message may be due at most; later ones are refused "
        "(Java timerMaxDelaySec).",
    ),
    click.option(
        "--acl-file",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Java's plain_acl.yml: check every broker request's AccessKey, Signature and permissions "
        "against it (tidemq server: nsqd requires AUTH '<accessKey>:<secretKey>' against it too, unless "
        "--auth-http-address is given); reloaded when it changes.",
    ),
)


def _store_config(
    data_dir: Path, flush: str, segment_size: int, retention_hours: float, opts: dict[str, Any]
) -> StoreConfig:
    full = opts.get("disk_full_ratio", 0.90)
    return StoreConfig(
        data_dir,
        segment_bytes=segment_size,
        flush_mode=FlushMode(flush),
        file_reserved_hours=retention_hours,
        retention_bytes=opts.get("retention_bytes", 0),
        disk_full_ratio=full,
        disk_writable_ratio=min(0.85, full),
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
        max_transfer_count=opts["max_transfer_count"],
        access_message_in_memory_max_ratio=opts["access_message_in_memory_max_ratio"],
        transaction_timeout_s=opts["transaction_timeout"],
        transaction_check_interval_s=opts["transaction_check_interval"],
        transaction_check_max=opts["transaction_check_max"],
        timer_max_delay_s=opts["timer_max_delay"],
    )
    if opts["acl_file"] is not None:
        try:
            read_acl_file(opts["acl_file"])
        except AclFileError as exc:
            raise click.BadParameter(f"{opts['acl_file']}: {exc}", param_hint="--acl-file") from None
        config.acl_file = str(opts["acl_file"])
    if opts["delay_levels"]:
        try:
            parse_delay_levels(opts["delay_levels"])
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--delay-levels") from None
        config.message_delay_levels = opts["delay_levels"]
    return config


def run_plan(plan: ServerPlan, event_loop: str = "asyncio") -> None:
    # A crash in native code (grpcio's C core, a compression library) kills the process with a signal and
    # no Python traceback; with this, every thread's Python stack goes to stderr (the server log) first,
    # so the log names what the server was doing (docs/reliability.md#fatal-signals).
    faulthandler.enable(all_threads=True)
    plan.on_ready = _ready
    loop_factory = _loop_factory(event_loop)
    try:
        _run_profiled(plan, loop_factory) if os.environ.get(PROFILE_ENV) else _run(plan, loop_factory)
    except (StoreError, ssl.SSLError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise click.ClickException(f"address already in use: {exc.strerror} ({_ports(plan)})") from None
        if exc.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
            raise click.ClickException(f"permission denied: {exc}") from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise click.ClickException(f"cannot listen on that address: {exc.strerror}") from None
        raise click.ClickException(str(exc)) from None


#: A path: the server runs under cProfile and dumps its stats there when it stops (SIGTERM or SIGINT stop
#: it cleanly), for benchmarks/nsq_latency.py --profile and by hand; unset, nothing is imported or wrapped.
PROFILE_ENV = "TIDEMQ_PROFILE"


def _run_profiled(plan: ServerPlan, loop_factory: LoopFactory | None) -> None:
    import cProfile

    profiler = cProfile.Profile()
    try:
        profiler.runcall(_run, plan, loop_factory)
    finally:
        profiler.dump_stats(os.environ[PROFILE_ENV])


LoopFactory = Callable[[], asyncio.AbstractEventLoop]

#: ``--event-loop``: uvloop runs the loop, its sockets and transports in C. A request that does little
#: Python work per round trip (one nsqd PUB, about 12 us) spends as long again in asyncio's own loop and
#: transport code, so uvloop cuts such a round trip by about a third (docs/performance.md).
EVENT_LOOPS = ("asyncio", "uvloop")


def _loop_factory(event_loop: str) -> LoopFactory | None:
    """None for asyncio's own loop."""
    if event_loop == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        raise click.ClickException(
            "--event-loop uvloop needs the uvloop package (pip install uvloop)"
        ) from None
    factory: LoopFactory = uvloop.new_event_loop
    return factory


def _run(plan: ServerPlan, loop_factory: LoopFactory | None) -> None:
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(serve(plan))


def _ready(parts: list[str]) -> None:
    """Freeze what start-up allocated (modules, config, recovered indexes) out of the collector's sight:
    otherwise every full collection walks those tens of thousands of objects, a ~20 ms stall for every
    connection at once."""
    gc.collect()
    gc.freeze()
    loop_module = type(asyncio.get_running_loop()).__module__.partition(".")[0]
    if loop_module != "asyncio":  # the event loop is named only when it is not the default
        parts = [*parts, f"event loop {loop_module}"]
    click.echo("tidemq ready: " + ", ".join(parts), err=False)


def _ports(plan: ServerPlan) -> str:
    parts = []
    if plan.namesrv_host is not None:
        parts.append(f"namesrv {plan.namesrv_host}:{plan.namesrv_port}")
    if plan.broker is not None:
        parts.append(f"broker {plan.broker.listen_host}:{plan.broker.port}")
    if plan.nsqd is not None:
        parts.append(f"nsqd {plan.nsqd.tcp_host}:{plan.nsqd.tcp_port} http {plan.nsqd.http_port}")
    if plan.lookupd is not None:
        parts.append(f"nsqlookupd {plan.lookupd.host}:{plan.lookupd.tcp_port} http {plan.lookupd.http_port}")
    if plan.grpc is not None:
        parts.append(f"grpc {plan.grpc.host}:{plan.grpc.port}")
    if plan.ops is not None:
        parts.append(f"http {plan.ops.host}:{plan.ops.port}")
    return ", ".join(parts)


def _listen_host(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Checked before anything starts, so that the error names the option (not a bare resolver error)."""
    try:
        socket.getaddrinfo(value, None, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise click.BadParameter(
            f"{value!r} is not an IP address or a host name that resolves ({reason})"
        ) from None
    return value


listen_option = click.option(
    "--listen", default=LOCALHOST, show_default=True, callback=_listen_host, help="Address to listen on."
)
namesrv_port_option = click.option(
    "--namesrv-port", type=click.IntRange(0, 65535), default=9876, show_default=True
)


def register(main: click.Group) -> None:
    @main.command()
    @config_option()
    @listen_option
    @namesrv_port_option
    @_broker_options
    @_store_options
    @click.option("--nsqd-tcp-port", type=click.IntRange(0, 65535), default=4150, show_default=True)
    @click.option("--nsqd-http-port", type=click.IntRange(0, 65535), default=4151, show_default=True)
    @click.option("--lookupd-tcp-port", type=click.IntRange(0, 65535), default=4160, show_default=True)
    @click.option("--lookupd-http-port", type=click.IntRange(0, 65535), default=4161, show_default=True)
    @click.option("--no-nsq", is_flag=True, help="Do not serve the NSQ protocol (nsqd).")
    @click.option("--no-lookupd", is_flag=True, help="Do not serve nsqlookupd.")
    @click.option(
        "--grpc-port",
        type=click.IntRange(0, 65535),
        default=8081,
        show_default=True,
        help="RocketMQ 5.x gRPC endpoint (apache.rocketmq.v2.MessagingService) for the 5.x SDKs.",
    )
    @click.option("--no-grpc", is_flag=True, help="Do not serve the RocketMQ 5.x gRPC endpoint.")
    @click.option(
        "--http-port",
        type=click.IntRange(0, 65535),
        default=8080,
        show_default=True,
        help="HTTP operations port on the --listen host: the web console at / and /metrics for Prometheus "
        "(0: a free port).",
    )
    @click.option("--no-http", is_flag=True, help="Do not serve the HTTP operations port.")
    @click.option(
        "--grpc-tls-cert",
        type=click.Path(dir_okay=False, exists=True, path_type=Path),
        default=None,
        help="PEM certificate chain: serve gRPC over TLS (with --grpc-tls-key).",
    )
    @click.option(
        "--grpc-tls-key",
        type=click.Path(dir_okay=False, exists=True, path_type=Path),
        default=None,
        help="PEM private key of --grpc-tls-cert.",
    )
    @nsq_options
    def server(
        listen: str,
        namesrv_port: int,
        data_dir: Path,
        flush: str,
        segment_size: int,
        retention_hours: float,
        nsqd_tcp_port: int,
        nsqd_http_port: int,
        lookupd_tcp_port: int,
        lookupd_http_port: int,
        no_nsq: bool,
        no_lookupd: bool,
        grpc_port: int,
        no_grpc: bool,
        grpc_tls_cert: Path | None,
        grpc_tls_key: Path | None,
        http_port: int,
        no_http: bool,
        **opts: Any,
    ) -> None:
        """Run a name server, a broker, an nsqd, an nsqlookupd and the gRPC endpoint over one store.

        Runs in the foreground; Ctrl-C stops it cleanly. The nsqd registers with the nsqlookupd.
        """
        store = _store_config(data_dir, flush, segment_size, retention_hours, opts)
        nsqd = nsqd_config(listen, nsqd_tcp_port, nsqd_http_port, opts)
        lookupd = LookupdConfig(
            listen,
            lookupd_tcp_port,
            lookupd_http_port,
            broadcast_address=nsqd.broadcast_address,
            connection_limits=nsqd.connection_limits,
        )
        broker = _broker_config(listen, [], opts)
        broker.connection_limits = nsqd.connection_limits  # the caps hold on every port
        nsqd.acl_file = broker.acl_file  # the same accounts guard AUTH on the NSQ side
        plan = ServerPlan(listen, namesrv_port, broker, store, namesrv_limits=nsqd.connection_limits)
        plan.nsqd = None if no_nsq else nsqd
        plan.lookupd = None if no_lookupd else lookupd
        if (grpc_tls_cert is None) != (grpc_tls_key is None):
            raise click.BadParameter(
                "give both --grpc-tls-cert and --grpc-tls-key", param_hint="--grpc-tls-key"
            )
        if not no_grpc:
            plan.grpc = GrpcConfig(
                listen,
                grpc_port,
                grpc_tls_cert,
                grpc_tls_key,
                max_connections=nsqd.connection_limits.max_connections,
            )
        if not no_http:
            plan.ops = OpsConfig(listen, http_port)
        run_plan(plan)

    @main.command(cls=GoFlagsCommand)
    @config_option()
    @click.option("--tcp-address", default=f"{LOCALHOST}:4150", show_default=True, help="TCP protocol V2.")
    @click.option("--http-address", default=f"{LOCALHOST}:4151", show_default=True, help="HTTP API.")
    @_store_options
    @nsq_options
    @click.option(
        "--event-loop",
        type=click.Choice(EVENT_LOOPS),
        default="asyncio",
        show_default=True,
        help="uvloop (if installed): shorter request round trips, e.g. a synchronous PUB.",
    )
    def nsqd(
        tcp_address: str,
        http_address: str,
        data_dir: Path,
        flush: str,
        segment_size: int,
        retention_hours: float,
        event_loop: str,
        **opts: Any,
    ) -> None:
        """Run an nsqd-compatible server alone (its own store under --data-dir).

        nsqd's own spellings work too, so its start scripts run unchanged: -tcp-address=HOST:PORT (one dash),
        --data-path, --max-bytes-per-file, --log-level=debug.
        """
        host, tcp_port = host_port(tcp_address, "--tcp-address")
        http_host, http_port = host_port(http_address, "--http-address")
        if http_host != host:
            raise click.BadParameter("must use the same host as --tcp-address", param_hint="--http-address")
        store = _store_config(data_dir, flush, segment_size, retention_hours, opts)
        run_plan(ServerPlan(None, 0, None, store, nsqd_config(host, tcp_port, http_port, opts)), event_loop)

    @main.command()
    @config_option()
    @listen_option
    @namesrv_port_option
    @connection_cap_options
    def namesrv(listen: str, namesrv_port: int, **opts: Any) -> None:
        """Run a name server alone."""
        run_plan(ServerPlan(listen, namesrv_port, namesrv_limits=connection_caps(opts)))

    @main.command()
    @config_option()
    @listen_option
    @click.option(
        "--namesrv", "namesrv_addr", required=True, help="HOST:PORT[;HOST:PORT...] of name servers."
    )
    @_broker_options
    @_store_options
    @connection_cap_options
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
            if not is_host_port(addr):
                raise click.BadParameter(f"{addr!r} is not HOST:PORT", param_hint="--namesrv")
        store = _store_config(data_dir, flush, segment_size, retention_hours, opts)
        config = _broker_config(listen, addrs, opts)
        config.connection_limits = connection_caps(opts)
        run_plan(ServerPlan(None, 0, config, store))
