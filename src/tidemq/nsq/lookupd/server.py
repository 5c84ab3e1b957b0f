"""The nsqlookupd-compatible server: a TCP listener for nsqd registrations, an HTTP one for discovery."""

from __future__ import annotations

import asyncio
import logging
import socket
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tidemq.address import LOCALHOST
from tidemq.connection_gate import ConnectionGate, ConnectionLimits
from tidemq.nsq.http_server import HttpGuard, serve
from tidemq.nsq.lookupd.http import make_app
from tidemq.nsq.lookupd.registry import RegistrationDB
from tidemq.nsq.lookupd.tcp import LookupConnection
from tidemq.nsq.protocol import VERSION

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LookupdConfig:
    """nsqlookupd's options; ports 0 pick free ones, and ``start`` writes back the real ones."""

    host: str = LOCALHOST
    tcp_port: int = 4160
    http_port: int = 4161
    #: What nsqd is told to reach this lookupd's HTTP API at; empty means the hostname, as in nsqlookupd.
    broadcast_address: str = ""
    inactive_producer_timeout_s: float = 300.0
    tombstone_lifetime_s: float = 45.0
    #: Separate HTTP host; None means ``host``.
    http_host: str | None = None
    #: Each port's idle timeout and connection caps (docs/nsq-lookupd.md#connection-limits); the idle
    #: timeout must exceed nsqd's 15 s PING interval.
    connection_limits: ConnectionLimits = field(default_factory=ConnectionLimits)


class Nsqlookupd:
    def __init__(self, config: LookupdConfig) -> None:
        self.config = config
        self.hostname = socket.gethostname()
        self.broadcast_address = config.broadcast_address or self.hostname
        self.db = RegistrationDB(
            inactive_producer_timeout_s=config.inactive_producer_timeout_s,
            tombstone_lifetime_s=config.tombstone_lifetime_s,
        )
        self.connections: set[LookupConnection] = set()
        self.tcp_gate = ConnectionGate(config.connection_limits)
        self._tcp: asyncio.Server | None = None
        self._http: web.AppRunner | None = None

    def identify_reply(self) -> dict[str, Any]:
        return {
            "tcp_port": self.config.tcp_port,
            "http_port": self.config.http_port,
            "version": VERSION,
            "broadcast_address": self.broadcast_address,
            "hostname": self.hostname,
        }

    async def start(self) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        self._tcp = await loop.create_server(lambda: LookupConnection(self), cfg.host, cfg.tcp_port)
        cfg.tcp_port = self._tcp.sockets[0].getsockname()[1]
        try:
            guard = HttpGuard("lookupd http", cfg.connection_limits)
            self._http, cfg.http_port = await serve(
                make_app(self.db), cfg.http_host or cfg.host, cfg.http_port, guard
            )
        except BaseException:
            await self.close()
            raise
        log.info(
            "nsqlookupd: TCP on %s:%d, HTTP on %s:%d, broadcasting %s",
            cfg.host,
            cfg.tcp_port,
            cfg.http_host or cfg.host,
            cfg.http_port,
            self.broadcast_address,
        )

    async def close(self) -> None:
        if self._tcp is not None:
            self._tcp.close()
        for conn in list(self.connections):
            conn.close()
        if self._tcp is not None:
            await self._tcp.wait_closed()
            self._tcp = None
        if self._http is not None:
            await self._http.cleanup()
            self._http = None
