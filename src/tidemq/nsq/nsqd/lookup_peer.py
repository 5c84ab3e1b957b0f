"""nsqd's side of nsqlookupd's TCP protocol V1 (docs/protocols/nsq-lookupd.md#nsqds-registrar): announce
topics and channels, keep alive.

One peer per lookupd address, each with its own task working through a queue of commands. A peer
connects lazily: on start, on a queued command and on the periodic PING. Each (re)connect sends the
magic and IDENTIFY, then registers everything nsqd currently has, so a command that was dropped while
the lookupd was unreachable is covered by that full re-registration. Failed connects back off
(doubling up to a bound) so a dead lookupd is never hammered, and an outage is logged once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections import deque
from collections.abc import Callable
from typing import Any

import orjson

from tidemq.address import join_host_port, split_host_port
from tidemq.aio import cancel_and_wait
from tidemq.nsq.protocol import MAGIC_V1, encode_command

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")

Registrations = Callable[[], list[tuple[str, str | None]]]


def _registration(verb: str, topic: str, channel: str | None) -> bytes:
    """REGISTER or UNREGISTER of a topic, or of one of its channels."""
    return encode_command(verb, topic, *([channel] if channel else []))


class LookupdError(Exception):
    """A lookupd peer failed: unreachable, timed out, closed, or answered with an error."""


class LookupPeer:
    """One lookupd: a connection (when there is one) and the task that serialises commands over it."""

    def __init__(self, registrar: LookupdRegistrar, addr: str) -> None:
        self.registrar = registrar
        self.addr = addr
        #: The lookupd's IDENTIFY answer: ``tcp_port``, ``http_port``, ``version``, ``broadcast_address``.
        self.info: dict[str, Any] = {}
        #: Connection attempts and successful (re)connects, for stats and for tests of the backoff.
        self.connect_attempts = 0
        self.connects = 0
        self._queue: deque[bytes] = deque()
        self._wake = asyncio.Event()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None
        self._backoff = 0.0
        self._retry_at = 0.0
        self._retry_pending = False
        self._resync = False
        self._in_outage = False
        self._closing = False

    @property
    def connected(self) -> bool:
        return self._writer is not None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    def enqueue(self, command: bytes) -> None:
        if len(self._queue) >= self.registrar.max_pending:
            # Too far behind: start over on a fresh connection, which re-registers the current state.
            self._queue.clear()
            self._resync = True
        else:
            self._queue.append(command)
        self._wake.set()

    async def close(self) -> None:
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None
        writer = self._writer
        self._disconnect()
        if writer is not None:
            with contextlib.suppress(OSError, TimeoutError):
                async with asyncio.timeout(self.registrar.io_timeout_s):
                    await writer.wait_closed()

    # --- the peer's loop ------------------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self.registrar.ping_interval_s
        next_ping = loop.time() + interval
        await self._execute(None)
        while not self._closing:
            if not self._queue and not self._resync:
                deadline = next_ping
                if self._retry_pending and not self.connected:
                    deadline = min(deadline, self._retry_at)
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout_at(deadline):
                        await self._wake.wait()
            if loop.time() >= next_ping:  # first: REGISTERs do not count as liveness for lookupd
                next_ping = loop.time() + interval
                await self._execute(encode_command("PING"))
            elif self._queue:
                await self._execute(self._queue.popleft())
            elif self._resync or (self._retry_pending and loop.time() >= self._retry_at):
                await self._execute(None)

    async def _execute(self, command: bytes | None) -> None:
        """Send ``command`` (connecting first if needed); None only makes sure there is a connection."""
        if self._resync:
            self._resync = False
            self._disconnect()
        if not self.connected:
            if asyncio.get_running_loop().time() < self._retry_at:
                self._retry_pending = True  # the connect after the backoff re-registers everything
                return
            try:
                await self._connect()
            except (OSError, LookupdError, TimeoutError) as exc:
                self._fail(exc)
                return
        if command is None:
            return
        try:
            await self._roundtrip(command)
        except (OSError, LookupdError, TimeoutError) as exc:
            self._fail(exc, command)

    async def _connect(self) -> None:
        registrar = self.registrar
        host, port = split_host_port(self.addr)
        self.connect_attempts += 1
        async with asyncio.timeout(registrar.dial_timeout_s):
            reader, writer = await asyncio.open_connection(host, port)
        self._reader, self._writer = reader, writer
        writer.write(MAGIC_V1)
        reply = await self._roundtrip(encode_command("IDENTIFY", body=orjson.dumps(registrar.identity)))
        try:
            info = orjson.loads(reply)
        except orjson.JSONDecodeError:
            raise LookupdError(f"IDENTIFY answer is not JSON: {reply[:100]!r}") from None
        if not isinstance(info, dict):
            raise LookupdError(f"IDENTIFY answer is not a JSON object: {reply[:100]!r}")
        self.info = {k: info.get(k) for k in ("tcp_port", "http_port", "version", "broadcast_address")}
        if not self.info["broadcast_address"]:
            log.error("lookupd %s: its IDENTIFY answer has no broadcast address", self.addr)
        for topic, channel in registrar.registrations():
            await self._roundtrip(_registration("REGISTER", topic, channel))
        self.connects += 1
        self._backoff, self._retry_at, self._retry_pending = 0.0, 0.0, False
        if self._in_outage:
            log.info("lookupd %s: reachable again; registrations restored", self.addr)
            self._in_outage = False
        else:
            log.info("lookupd %s: connected (%s)", self.addr, self.info)

    async def _roundtrip(self, command: bytes) -> bytes:
        assert self._reader is not None and self._writer is not None
        timeout = self.registrar.io_timeout_s
        self._writer.write(command)
        try:
            async with asyncio.timeout(timeout):
                await self._writer.drain()
                (size,) = _SIZE.unpack(await self._reader.readexactly(4))
                if size < 0 or size > self.registrar.max_response_size:
                    raise LookupdError(f"response size {size} out of range")
                data = await self._reader.readexactly(size)
        except asyncio.IncompleteReadError:
            raise LookupdError("connection closed") from None
        if data.startswith(b"E_"):
            raise LookupdError(data.decode(errors="replace"))  # every lookupd error closes the connection
        return data

    def _fail(self, exc: BaseException, command: bytes | None = None) -> None:
        self._disconnect()
        floor, cap = self.registrar.min_backoff_s, self.registrar.max_backoff_s
        self._backoff = min(cap, max(floor, self._backoff * 2))
        self._retry_at = asyncio.get_running_loop().time() + self._backoff
        self._retry_pending = True
        what = command.split(b"\n", 1)[0].decode(errors="replace") if command else "connect"
        reason = str(exc) or type(exc).__name__
        if not self._in_outage:
            self._in_outage = True
            log.warning("lookupd %s: %s failed (%s); retrying with backoff", self.addr, what, reason)
        else:
            log.debug(
                "lookupd %s: still unreachable (%s); next try in %.1fs", self.addr, reason, self._backoff
            )

    def _disconnect(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


class LookupdRegistrar:
    """Keeps every configured nsqlookupd informed of this nsqd's topics and channels.

    ``identity`` is the IDENTIFY body (``version``, ``tcp_port``, ``http_port``, ``hostname``,
    ``broadcast_address``); ``registrations`` returns what nsqd has now, as ``(topic, channel or
    None)``, a topic without channels appearing once with None.
    """

    def __init__(
        self,
        addresses: list[str],
        identity: dict[str, Any],
        registrations: Registrations,
        *,
        ping_interval_s: float = 15.0,
        dial_timeout_s: float = 1.0,
        io_timeout_s: float = 1.0,
        min_backoff_s: float = 1.0,
        max_backoff_s: float = 15.0,
        max_response_size: int = 5 * 1024 * 1024,
        max_pending: int = 10_000,
    ) -> None:
        self.identity = identity
        self.registrations = registrations
        self.ping_interval_s = ping_interval_s
        self.dial_timeout_s = dial_timeout_s
        self.io_timeout_s = io_timeout_s
        self.min_backoff_s = min_backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_response_size = max_response_size
        self.max_pending = max_pending
        self.peers: dict[str, LookupPeer] = {}
        self._started = False
        for addr in self._validated(addresses):
            self.peers[addr] = LookupPeer(self, addr)

    @staticmethod
    def _validated(addresses: list[str]) -> list[str]:
        out: list[str] = []
        for addr in addresses:
            addr = addr.strip()
            split_host_port(addr)
            if addr not in out:
                out.append(addr)
        return out

    @property
    def addresses(self) -> list[str]:
        return list(self.peers)

    async def start(self) -> None:
        self._started = True
        for peer in self.peers.values():
            peer.start()

    async def close(self) -> None:
        self._started = False
        peers = list(self.peers.values())
        for peer in peers:
            await peer.close()

    def register(self, topic: str, channel: str | None = None) -> None:
        self._broadcast(_registration("REGISTER", topic, channel))

    def unregister(self, topic: str, channel: str | None = None) -> None:
        self._broadcast(_registration("UNREGISTER", topic, channel))

    def _broadcast(self, command: bytes) -> None:
        for peer in self.peers.values():
            peer.enqueue(command)

    async def set_addresses(self, addresses: list[str]) -> None:
        """Swap the lookupd set (nsqd's ``PUT /config/nsqlookupd_tcp_addresses``); kept peers stay up."""
        wanted = self._validated(addresses)
        for addr in [a for a in self.peers if a not in wanted]:
            log.info("lookupd %s: removing peer", addr)
            await self.peers.pop(addr).close()
        for addr in wanted:
            if addr not in self.peers:
                log.info("lookupd %s: adding peer", addr)
                peer = self.peers[addr] = LookupPeer(self, addr)
                if self._started:
                    peer.start()
        self.peers = {addr: self.peers[addr] for addr in wanted}

    def lookupd_http_addresses(self) -> list[str]:
        """``broadcast_address:http_port`` of each lookupd that answered IDENTIFY (nsqd asks them for
        a topic's channels)."""
        out = []
        for peer in self.peers.values():
            host, port = peer.info.get("broadcast_address"), peer.info.get("http_port")
            if host and isinstance(port, int):
                out.append(join_host_port(str(host), port))
        return out
