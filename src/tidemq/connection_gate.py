"""What keeps one client from exhausting a listening port (remoting, NSQ TCP and HTTP, nsqlookupd): idle
timeouts, connection caps per IP and in total, and a refusal log that cannot flood the disk
(docs/nsq-server.md#connection-limits, docs/rocketmq-broker.md#connection-limits).

Neither nsqd nor RocketMQ caps connections; a Go or Netty server survives tens of thousands of idle
sockets cheaply, a Python one pays for each in memory, so tidemq bounds them. It sits at the package top
level because every front-end uses it and none may import another.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class ConnectionLimits:
    """Per listening port; 0 turns a limit off."""

    #: A connection that sent nothing this long (and has no request in progress) is closed.
    idle_timeout_s: float = 60.0
    #: Open connections from one IP address.
    max_connections_per_ip: int = 1_000
    #: Open connections in total. asyncio tears a connection down in about 20-40 us of the loop, and a
    #: crowd that disconnects at once (a restart, an abusive client) is torn down in one go: 4,096 keeps
    #: that under about 100 ms (docs/reliability.md#abuse-cases-beside-a-canary).
    max_connections: int = 4_096

    def __post_init__(self) -> None:
        if self.idle_timeout_s < 0 or self.max_connections_per_ip < 0 or self.max_connections < 0:
            raise ValueError("connection limits must not be negative")


class ConnectionGate:
    """Counts one port's open connections and says whether another may join, and if not why."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.total = 0
        self.by_ip: Counter[str] = Counter()

    def admit(self, ip: str) -> str | None:
        """None when ``ip`` may connect (and it is then counted); otherwise the refusal's reason."""
        limits = self.limits
        if limits.max_connections and self.total >= limits.max_connections:
            return f"{self.total} connections open (--max-connections {limits.max_connections})"
        if limits.max_connections_per_ip and self.by_ip[ip] >= limits.max_connections_per_ip:
            return (
                f"{self.by_ip[ip]} connections open from {ip} "
                f"(--max-connections-per-ip {limits.max_connections_per_ip})"
            )
        self.total += 1
        self.by_ip[ip] += 1
        return None

    def release(self, ip: str) -> None:
        self.total -= 1
        self.by_ip[ip] -= 1
        if self.by_ip[ip] <= 0:
            del self.by_ip[ip]


class RateLimitedLog:
    """One warning line per event, at most ``per_second`` a second; the rest are counted and the next line
    written says how many were suppressed, so an abusive client costs a few lines, not megabytes."""

    def __init__(self, logger: logging.Logger, per_second: int) -> None:
        self.logger = logger
        self.per_second = per_second
        self.suppressed = 0
        self._window = 0
        self._written = 0

    def warning(self, msg: str, *args: object) -> None:
        window = int(time.monotonic())
        if window != self._window:
            self._window = window
            self._written = 0
        if self.per_second and self._written >= self.per_second:
            self.suppressed += 1
            if self.suppressed == 1:
                self._flush_later()
            return
        self._written += 1
        if self.suppressed:
            msg += " (%d similar lines suppressed)"
            args = (*args, self.suppressed)
            self.suppressed = 0
        self.logger.warning(msg, *args)

    def _flush_later(self) -> None:
        """Report the count even if no further event comes to carry it."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        loop.call_later(1.0, self._flush)

    def _flush(self) -> None:
        if self.suppressed:
            self.logger.warning("%d similar lines suppressed", self.suppressed)
            self.suppressed = 0
