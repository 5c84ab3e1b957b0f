"""Run the name server and broker in one process: the embedded default for a laptop, CI or one node."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.registry import Collector

from tidemq import loop_monitor
from tidemq.acl import AclWatcher
from tidemq.broker.broker import Broker
from tidemq.broker.config import BrokerConfig
from tidemq.broker.metrics import BrokerCollector
from tidemq.connection_gate import ConnectionLimits
from tidemq.console import ConsoleSettings, create_console_app
from tidemq.grpc.server import GrpcConfig, GrpcServer
from tidemq.namesrv import NameServer
from tidemq.nsq.lookupd import LookupdConfig, Nsqlookupd
from tidemq.nsq.nsqd.config import NsqdConfig
from tidemq.nsq.nsqd.metrics import NsqdCollector
from tidemq.nsq.nsqd.server import Nsqd
from tidemq.ops import OpsConfig, OpsServer
from tidemq.ops.server import ConnectionsCollector
from tidemq.store import MessageStore, StoreConfig
from tidemq.store.metrics import StoreCollector

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ServerPlan:
    """What to run: any of a name server, a broker, an nsqd and an nsqlookupd (``tidemq server``: all)."""

    namesrv_host: str | None = None
    namesrv_port: int = 9876
    broker: BrokerConfig | None = None
    store: StoreConfig | None = None
    nsqd: NsqdConfig | None = None
    lookupd: LookupdConfig | None = None
    grpc: GrpcConfig | None = None  # the RocketMQ 5.x gRPC endpoint over the broker
    ops: OpsConfig | None = None  # the HTTP operations port: /metrics (and the web console)
    console: bool = True  # the web console at "/" of the operations port
    on_ready: Callable[[list[str]], None] | None = None
    #: The name server port's connection caps.
    namesrv_limits: ConnectionLimits = field(default_factory=ConnectionLimits)


def shared_acl(plan: ServerPlan) -> AclWatcher | None:
    """One watcher of the ACL file when the broker and nsqd both check it (``tidemq server``): the file is
    read once per change and the two front-ends can never apply different rules. None otherwise: a lone
    front-end watches its file itself."""
    if plan.broker is None or plan.nsqd is None or not plan.broker.acl_file:
        return None
    if plan.nsqd.acl_file != plan.broker.acl_file or plan.nsqd.auth_http_addresses:
        return None
    return AclWatcher(Path(plan.broker.acl_file))


async def serve(plan: ServerPlan, stop: asyncio.Event | None = None) -> None:
    """Start what the plan names, wait for SIGINT/SIGTERM (or ``stop``), then shut down cleanly."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    namesrv: NameServer | None = None
    broker: Broker | None = None
    nsqd: Nsqd | None = None
    lookupd: Nsqlookupd | None = None
    grpc_server: GrpcServer | None = None
    own_store: MessageStore | None = None
    acl = shared_acl(plan)
    ops: OpsServer | None = None
    ready: list[str] = []
    loop_monitor.MONITOR.start()
    try:
        if acl is not None:
            acl.start()
        if plan.namesrv_host is not None:
            namesrv = NameServer(plan.namesrv_host, plan.namesrv_port, limits=plan.namesrv_limits)
            await namesrv.start()
            ready.append(f"namesrv {plan.namesrv_host}:{namesrv.port}")
            if plan.broker is not None and not plan.broker.namesrv_addrs:
                plan.broker.namesrv_addrs = [f"{plan.namesrv_host}:{namesrv.port}"]
        if plan.broker is not None:
            assert plan.store is not None
            broker = Broker(plan.broker, plan.store, acl=acl)
            await broker.start()
            ready.append(f"broker {plan.broker.broker_name} {plan.broker.advertised_addr}")
            if plan.grpc is not None:
                grpc_server = GrpcServer(plan.grpc, broker)
                await grpc_server.start()
                ready.append(
                    f"grpc {plan.grpc.host}:{grpc_server.port}" + (" tls" if grpc_server.tls else "")
                )
        if plan.lookupd is not None:
            lookupd = Nsqlookupd(plan.lookupd)
            await lookupd.start()
            ready.append(
                f"nsqlookupd {plan.lookupd.host}:{plan.lookupd.tcp_port} http {plan.lookupd.http_port}"
            )
            if plan.nsqd is not None:  # the embedded nsqd registers with the embedded lookupd
                plan.nsqd.lookupd_tcp_addresses.append(f"{plan.lookupd.host}:{plan.lookupd.tcp_port}")
        if plan.nsqd is not None:
            if broker is not None:
                store = broker.store  # one log store under both front-ends
            else:
                assert plan.store is not None
                store = own_store = MessageStore(plan.store)
                await own_store.start()
            nsqd = Nsqd(plan.nsqd, store, acl=acl)
            await nsqd.start()
            ready.append(f"nsqd {plan.nsqd.tcp_host}:{nsqd.tcp_port} http {plan.nsqd.http_port}")
        if plan.ops is not None:
            if plan.console:
                plan.ops.root_app = create_console_app(_console_settings(plan))
            ops = OpsServer(plan.ops, _collectors(namesrv, broker, nsqd, own_store))
            await ops.start()
            ready.append(f"http {plan.ops.host}:{ops.port}")
        if plan.on_ready is not None:
            plan.on_ready(ready)
        await stop.wait()
        log.info("shutting down")
    finally:
        if ops is not None:
            await ops.close()
        if nsqd is not None:
            await nsqd.close()
        if lookupd is not None:
            await lookupd.close()
        if grpc_server is not None:
            await grpc_server.close()
        if own_store is not None:
            await own_store.close()
        if broker is not None:
            await broker.close()
        if namesrv is not None:
            await namesrv.close()
        if acl is not None:
            await acl.close()
        await loop_monitor.MONITOR.close()


def _console_settings(plan: ServerPlan) -> ConsoleSettings:
    """The console reaches this process's front-ends as any client would, at the ports they got."""

    def local(host: str) -> str:
        return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)

    namesrv = None if plan.namesrv_host is None else f"{local(plan.namesrv_host)}:{plan.namesrv_port}"
    if plan.broker is not None and plan.broker.namesrv_addrs:
        namesrv = ";".join(plan.broker.namesrv_addrs)
    nsqd, lookupd = plan.nsqd, plan.lookupd
    return ConsoleSettings(
        namesrv=namesrv or "",
        nsqd_http=f"{local(nsqd.tcp_host)}:{nsqd.http_port}" if nsqd and nsqd.http_port else None,
        lookupd_http=f"{local(lookupd.http_host or lookupd.host)}:{lookupd.http_port}" if lookupd else None,
        acl=bool(plan.broker is not None and plan.broker.acl_file),
    )


def _collectors(
    namesrv: NameServer | None, broker: Broker | None, nsqd: Nsqd | None, own_store: MessageStore | None
) -> list[Collector]:
    """What ``/metrics`` reads: each front-end's collector, its store's, and the connection counts."""
    collectors: list[Collector] = []
    counts: dict[str, Callable[[], int]] = {}
    if namesrv is not None:
        names = namesrv.server
        counts["namesrv"] = lambda: len(names.connections)
    store = broker.store if broker is not None else own_store
    if store is not None:
        collectors.append(StoreCollector(store))
    if broker is not None:
        collectors.append(BrokerCollector(broker))
        server = broker.server
        counts["broker"] = lambda: len(server.connections)
    if nsqd is not None:
        collectors.append(NsqdCollector(nsqd))
        nsq = nsqd
        counts["nsqd"] = lambda: len(nsq.connections)
    collectors.append(ConnectionsCollector(counts))
    return collectors
