"""Run the name server and broker in one process: the embedded default for a laptop, CI or one node."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass, field

from tidemq import loop_monitor
from tidemq.broker.broker import Broker
from tidemq.broker.config import BrokerConfig
from tidemq.connection_gate import ConnectionLimits
from tidemq.grpc.server import GrpcConfig, GrpcServer
from tidemq.namesrv import NameServer
from tidemq.nsq.lookupd import LookupdConfig, Nsqlookupd
from tidemq.nsq.nsqd.config import NsqdConfig
from tidemq.nsq.nsqd.server import Nsqd
from tidemq.store import MessageStore, StoreConfig

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
    on_ready: Callable[[list[str]], None] | None = None
    #: The name server port's connection caps.
    namesrv_limits: ConnectionLimits = field(default_factory=ConnectionLimits)


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
    ready: list[str] = []
    loop_monitor.MONITOR.start()
    try:
        if plan.namesrv_host is not None:
            namesrv = NameServer(plan.namesrv_host, plan.namesrv_port, limits=plan.namesrv_limits)
            await namesrv.start()
            ready.append(f"namesrv {plan.namesrv_host}:{namesrv.port}")
            if plan.broker is not None and not plan.broker.namesrv_addrs:
                plan.broker.namesrv_addrs = [f"{plan.namesrv_host}:{namesrv.port}"]
        if plan.broker is not None:
            assert plan.store is not None
            broker = Broker(plan.broker, plan.store)
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
            nsqd = Nsqd(plan.nsqd, store)
            await nsqd.start()
            ready.append(f"nsqd {plan.nsqd.tcp_host}:{nsqd.tcp_port} http {plan.nsqd.http_port}")
        if plan.on_ready is not None:
            plan.on_ready(ready)
        await stop.wait()
        log.info("shutting down")
    finally:
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
        await loop_monitor.MONITOR.close()
