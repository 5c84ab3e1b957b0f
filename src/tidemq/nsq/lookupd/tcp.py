"""nsqlookupd's TCP protocol V1 (docs/protocols/nsq-lookupd.md#tcp-protocol): a sans-IO parser and the asyncio
connection on top.

Replies are ``[int32 size][data]`` with no frame type; every error is sent the same way and then ends
the connection.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import orjson

from tidemq.address import join_host_port
from tidemq.aio import BufferedReceiver
from tidemq.connection_gate import RateLimitedLog
from tidemq.nsq.lookupd.registry import PeerInfo
from tidemq.nsq.protocol import (
    MAGIC_V1,
    MAX_LINE,
    OK,
    BodyAhead,
    Command,
    CommandParser,
    FinRun,
    NSQError,
    valid_name,
)

if TYPE_CHECKING:
    from tidemq.nsq.lookupd.server import Nsqlookupd

log = logging.getLogger(__name__)
#: Refusals past the connection caps: a few lines a second, however many are refused.
bad_requests = RateLimitedLog(log, 5)

MAX_IDENTIFY_BODY = 1024 * 1024
_SIZE = struct.Struct(">i")


def encode_response(data: bytes) -> bytes:
    return _SIZE.pack(len(data)) + data


@dataclass(slots=True)
class LookupCommand:
    name: str
    params: list[str]
    body: bytes | None = None


class LookupParser(CommandParser):
    """Bytes in, commands (or the one fatal error that ends the connection) out: nsqd's parser with
    lookupd's magic, its one body command and its limits.

    With ``announce_bodies`` an IDENTIFY line comes first as a ``BodyAhead``, so the connection can refuse
    a second IDENTIFY as soon as its line arrives, as nsqlookupd does, instead of waiting for a body the
    client may never send.
    """

    magic = MAGIC_V1
    body_commands = frozenset({b"IDENTIFY"})
    fin_runs = False

    def __init__(self, *, announce_bodies: bool = False) -> None:
        super().__init__(announce_bodies=announce_bodies)

    def feed(  # type: ignore[override]
        self, data: bytes | memoryview
    ) -> Iterator[LookupCommand | NSQError | BodyAhead]:
        for item in super().feed(data):
            if isinstance(item, Command):
                params = [p.decode(errors="replace") for p in item.params]
                yield LookupCommand(item.name.decode(errors="replace"), params, item.body)
            elif not isinstance(item, FinRun):  # never a FinRun: fin_runs is off
                yield item

    def _parse_line(self, line: bytes) -> Command:
        name, *params = line.strip().split(b" ")
        return Command(name, params)

    def _line_too_long(self) -> NSQError:
        return NSQError("E_INVALID", f"command line longer than {MAX_LINE} bytes")

    def _body_size_problem(self, name: bytes, size: int) -> NSQError | None:
        if size < 0 or size > MAX_IDENTIFY_BODY:
            return NSQError("E_BAD_BODY", f"IDENTIFY invalid body size {size}")
        return None


def _topic_channel(verb: str, params: list[str]) -> tuple[str, str | None]:
    if not params:
        raise NSQError("E_INVALID", f"{verb} insufficient number of params")
    topic = params[0]
    channel = params[1] if len(params) > 1 and params[1] else None
    if not valid_name(topic):
        raise NSQError("E_BAD_TOPIC", f"{verb} topic name '{topic}' is not valid")
    if channel is not None and not valid_name(channel):
        raise NSQError("E_BAD_CHANNEL", f"{verb} channel name '{channel}' is not valid")
    return topic, channel


def _peer_from_identify(body: bytes, peer_id: str) -> PeerInfo:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise NSQError("E_BAD_BODY", "IDENTIFY failed to decode JSON body") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise NSQError("E_BAD_BODY", "IDENTIFY failed to decode JSON body")
    fields: dict[str, Any] = {}
    for name in ("broadcast_address", "hostname", "version"):  # nsqlookupd 1.3.0 knows no topology
        value = data.get(name)
        if value is not None and not isinstance(value, str):
            raise NSQError("E_BAD_BODY", "IDENTIFY failed to decode JSON body")
        fields[name] = value or ""
    for name in ("tcp_port", "http_port"):
        value = data.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise NSQError("E_BAD_BODY", "IDENTIFY failed to decode JSON body")
        fields[name] = value or 0
    if not all(fields[name] for name in ("broadcast_address", "tcp_port", "http_port", "version")):
        raise NSQError("E_BAD_BODY", "IDENTIFY missing fields")
    return PeerInfo(id=peer_id, remote_address=peer_id, **fields)


class LookupConnection(BufferedReceiver):
    """One nsqd's connection: commands run synchronously as they are parsed (none of them waits)."""

    def __init__(self, lookupd: Nsqlookupd) -> None:
        self.lookupd = lookupd
        self.parser = LookupParser(announce_bodies=True)
        self.transport: asyncio.Transport | None = None
        self.remote = ""
        self.ip = ""
        self.peer: PeerInfo | None = None
        self.admitted = False
        self.last_read = 0.0
        self.idle_handle: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        peer = transport.get_extra_info("peername")
        self.remote = join_host_port(peer[0], peer[1]) if peer else ""
        self.ip = str(peer[0]) if peer else ""
        reason = self.lookupd.tcp_gate.admit(self.ip)
        if reason is not None:
            bad_requests.warning("lookupd: refused a connection from %s: %s", self.remote, reason)
            self.transport.write(encode_response(b"E_TOO_MANY_CONNECTIONS " + reason.encode()))
            self.transport.close()
            return
        self.admitted = True
        self.lookupd.connections.add(self)
        self.last_read = asyncio.get_running_loop().time()
        self._schedule_idle_check(self.last_read)
        log.debug("lookupd: new client %s", self.remote)

    def _schedule_idle_check(self, since: float) -> None:
        timeout = self.lookupd.config.connection_limits.idle_timeout_s
        if timeout > 0:
            self.idle_handle = asyncio.get_running_loop().call_at(since + timeout, self._check_idle)

    def _check_idle(self) -> None:
        """nsqd PINGs every 15 s: a connection silent for the idle timeout is not a live nsqd."""
        self.idle_handle = None
        timeout = self.lookupd.config.connection_limits.idle_timeout_s
        if asyncio.get_running_loop().time() - self.last_read < timeout:
            self._schedule_idle_check(self.last_read)
            return
        log.info("lookupd: client %s sent nothing for %.0fs; closing", self.remote, timeout)
        self.close()

    def data_received(self, data: memoryview) -> None:
        if not self.admitted:
            return
        self.last_read = asyncio.get_running_loop().time()
        for item in self.parser.feed(data):
            try:
                if isinstance(item, NSQError):
                    raise item
                if isinstance(item, BodyAhead):
                    if self.peer is not None:
                        self.parser.refuse()
                        raise NSQError("E_INVALID", "cannot IDENTIFY again")
                    continue
                self._write(self._execute(item))
            except NSQError as err:
                log.info("lookupd: client %s: %s; closing", self.remote, err)
                self._write(err.payload)
                self.close()
                return

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.admitted:
            return
        self.admitted = False
        self.lookupd.tcp_gate.release(self.ip)
        if self.idle_handle is not None:
            self.idle_handle.cancel()
            self.idle_handle = None
        self.lookupd.connections.discard(self)
        if self.peer is not None:
            self.lookupd.db.disconnect(self.peer.id)
            log.info("lookupd: client %s closed; its registrations are gone", self.remote)
            self.peer = None

    def pause_writing(self) -> None:
        """A client that sends commands but does not read its replies is not read from either."""
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(encode_response(data))

    def _execute(self, cmd: LookupCommand) -> bytes:
        db = self.lookupd.db
        if cmd.name == "PING":
            if self.peer is not None:
                db.touch(self.peer)
            return OK
        if cmd.name == "IDENTIFY":
            self.peer = _peer_from_identify(cmd.body or b"", self.remote)
            db.identify(self.peer)
            return orjson.dumps(self.lookupd.identify_reply())
        if cmd.name in ("REGISTER", "UNREGISTER"):
            if self.peer is None:
                raise NSQError("E_INVALID", "client must IDENTIFY")
            topic, channel = _topic_channel(cmd.name, cmd.params)
            if cmd.name == "REGISTER":
                db.register(self.peer, topic, channel)
            else:
                db.unregister(self.peer, topic, channel)
            log.debug("lookupd: client %s %s %s %s", self.remote, cmd.name, topic, channel or "")
            return OK
        raise NSQError("E_INVALID", f"invalid command {cmd.name}")
