"""nsqlookupd's TCP protocol V1 (spec 4.1): a sans-IO parser and the asyncio connection on top.

Replies are ``[int32 size][data]`` with no frame type; every error is sent the same way and then ends
the connection.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from tidemq.nsq.lookupd.registry import PeerInfo
from tidemq.nsq.protocol import OK, NSQError, valid_name

if TYPE_CHECKING:
    from tidemq.nsq.lookupd.server import Nsqlookupd

log = logging.getLogger(__name__)

MAGIC_V1 = b"  V1"
MAX_LINE = 16 * 1024
MAX_IDENTIFY_BODY = 1024 * 1024
_SIZE = struct.Struct(">i")


def encode_response(data: bytes) -> bytes:
    return _SIZE.pack(len(data)) + data


@dataclass(slots=True)
class LookupCommand:
    name: str
    params: list[str]
    body: bytes | None = None


class LookupParser:
    """Bytes in, commands (or the one fatal error that ends the connection) out.

    Only IDENTIFY carries a body. Once ``identified`` is set, a second IDENTIFY is refused as soon as
    its line arrives, as nsqlookupd does, instead of waiting for a body the client may never send.
    The parser is a generator, so the caller can set ``identified`` between commands.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._magic_seen = False
        self._pending: LookupCommand | None = None
        self._body_size = -1
        self.identified = False
        self.broken = False

    def feed(self, data: bytes) -> Iterator[LookupCommand | NSQError]:
        if self.broken:
            return
        self._buf += data
        if not self._magic_seen:
            if len(self._buf) < 4:
                return
            magic = bytes(self._buf[:4])
            if magic != MAGIC_V1:
                self.broken = True
                yield NSQError("E_BAD_PROTOCOL", "")  # nsqlookupd sends the bare code
                return
            del self._buf[:4]
            self._magic_seen = True
        while not self.broken:
            item = self._next()
            if item is None:
                return
            if isinstance(item, NSQError):
                self.broken = True
            yield item

    def _next(self) -> LookupCommand | NSQError | None:
        buf = self._buf
        if self._pending is not None:
            return self._body()
        end = buf.find(b"\n")
        if end < 0:
            if len(buf) > MAX_LINE:
                return NSQError("E_INVALID", f"command line longer than {MAX_LINE} bytes")
            return None
        line = bytes(buf[:end]).strip().decode(errors="replace")
        del buf[: end + 1]
        name, *params = line.split(" ")
        cmd = LookupCommand(name, params)
        if name != "IDENTIFY":
            return cmd
        if self.identified:
            return NSQError("E_INVALID", "cannot IDENTIFY again")
        self._pending = cmd
        return self._body()

    def _body(self) -> LookupCommand | NSQError | None:
        buf = self._buf
        assert self._pending is not None
        if self._body_size < 0:
            if len(buf) < 4:
                return None
            (size,) = _SIZE.unpack_from(buf, 0)
            del buf[:4]
            if size < 0 or size > MAX_IDENTIFY_BODY:
                return NSQError("E_BAD_BODY", f"IDENTIFY invalid body size {size}")
            self._body_size = size
        if len(buf) < self._body_size:
            return None
        cmd = self._pending
        cmd.body = bytes(buf[: self._body_size])
        del buf[: self._body_size]
        self._pending, self._body_size = None, -1
        return cmd


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
    for name in ("broadcast_address", "hostname", "version", "topology_zone", "topology_region"):
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


def format_address(host: str, port: int) -> str:
    """``host:port`` as Go's net.JoinHostPort writes it (IPv6 hosts in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class LookupConnection(asyncio.Protocol):
    """One nsqd's connection: commands run synchronously as they are parsed (none of them waits)."""

    def __init__(self, lookupd: Nsqlookupd) -> None:
        self.lookupd = lookupd
        self.parser = LookupParser()
        self.transport: asyncio.Transport | None = None
        self.remote = ""
        self.peer: PeerInfo | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.remote = format_address(peer[0], peer[1]) if peer else ""
        self.lookupd.connections.add(self)
        log.debug("lookupd: new client %s", self.remote)

    def data_received(self, data: bytes) -> None:
        for item in self.parser.feed(data):
            try:
                if isinstance(item, NSQError):
                    raise item
                self._write(self._execute(item))
            except NSQError as err:
                log.info("lookupd: client %s: %s; closing", self.remote, err)
                self._write(err.payload)
                self.close()
                return

    def connection_lost(self, exc: Exception | None) -> None:
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
            self.parser.identified = True
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
