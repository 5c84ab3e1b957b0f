"""One client connection to nsqd (go-nsq ``conn.go``; spec 1.1-1.10 and 5.2).

Bootstrap: dial, magic, IDENTIFY, then the upgrades nsqd grants in its order (TLS, then snappy or deflate,
each confirmed by an ``OK``), then AUTH when required. Until compression starts, frames are read with exact
reads, so any compressed bytes that arrived behind the plaintext IDENTIFY reply stay in the stream buffer
and are the first thing fed to the decompressor (spec 1.8's "leftover bytes").

After bootstrap one read task parses frames and hands them to the delegate synchronously: heartbeats are
answered with NOP on the spot and message handling never blocks reading. Writes are queued and flushed once
per loop iteration, so pipelined commands share one (compressed) write.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from tidemq.address import split_host_port
from tidemq.aio import Bytes, OutputBuffer
from tidemq.nsq.client.config import Config
from tidemq.nsq.client.errors import AuthError, NotConnectedError, NSQClientError, ProtocolError
from tidemq.nsq.compression import CompressionError, Deflate, Snappy, StreamCompression
from tidemq.nsq.protocol import (
    HEARTBEAT,
    MAGIC_V2,
    OK,
    FrameParser,
    FrameType,
    Message,
    NSQError,
    decode_message,
    encode_command,
)

log = logging.getLogger(__name__)

READ_CHUNK = 256 * 1024
#: A size prefix of ASCII "HTTP": the address is an HTTP port (spec pitfall 18).
HTTP_SIZE = struct.unpack(">i", b"HTTP")[0]
DEFAULT_MAX_FRAME = 64 * 1024 * 1024
_MESSAGE_OVERHEAD = 4 + 26
_NOP = encode_command("NOP")
_SIZE = struct.Struct(">i")


class ConnDelegate(Protocol):
    """What the owner (consumer or producer) hears from a connection; called on the event loop."""

    def on_message(self, conn: NsqdConn, message: Message) -> None: ...

    def on_response(self, conn: NsqdConn, data: bytes) -> None: ...

    def on_error(self, conn: NsqdConn, data: bytes) -> None: ...

    def on_close(self, conn: NsqdConn) -> None: ...


@dataclass(frozen=True, slots=True)
class IdentifyResponse:
    """nsqd's answer to IDENTIFY with feature negotiation (spec 1.7)."""

    max_rdy_count: int = 2500
    version: str = ""
    max_msg_timeout: int = 0
    msg_timeout: int = 0
    tls_v1: bool = False
    deflate: bool = False
    deflate_level: int = 0
    snappy: bool = False
    sample_rate: int = 0
    auth_required: bool = False
    output_buffer_size: int = 0
    output_buffer_timeout: int = 0
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, data: bytes) -> IdentifyResponse:
        try:
            raw = orjson.loads(data)
            if not isinstance(raw, dict):
                raise TypeError("not an object")
            return cls(
                max_rdy_count=int(raw.get("max_rdy_count", 2500)),
                version=str(raw.get("version", "")),
                max_msg_timeout=int(raw.get("max_msg_timeout", 0)),
                msg_timeout=int(raw.get("msg_timeout", 0)),
                tls_v1=bool(raw.get("tls_v1", False)),
                deflate=bool(raw.get("deflate", False)),
                deflate_level=int(raw.get("deflate_level", 0)),
                snappy=bool(raw.get("snappy", False)),
                sample_rate=int(raw.get("sample_rate", 0)),
                auth_required=bool(raw.get("auth_required", False)),
                output_buffer_size=int(raw.get("output_buffer_size", 0)),
                output_buffer_timeout=int(raw.get("output_buffer_timeout", 0)),
                raw=raw,
            )
        except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
            raise NSQClientError(f"invalid IDENTIFY response {data[:200]!r}: {exc}") from None


@dataclass(frozen=True, slots=True)
class AuthResponse:
    identity: str
    identity_url: str
    permission_count: int


def _ms(seconds: float) -> int:
    return -1 if seconds < 0 else round(seconds * 1000)


class NsqdConn:
    """A connection to one nsqd. The RDY bookkeeping fields belong to the consumer that owns it."""

    def __init__(self, addr: str, config: Config, delegate: ConnDelegate) -> None:
        self.addr = addr
        self.config = config
        self.delegate = delegate
        self.identify: IdentifyResponse | None = None
        self.auth: AuthResponse | None = None
        # consumer state (go-nsq keeps it on the Conn too)
        self.max_rdy_count = 2500
        self.rdy = 0
        self.in_flight = 0
        self.closing = False
        self._loop = asyncio.get_running_loop()
        self.last_msg_time = self._loop.time()
        self.last_rdy_time = 0.0
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        #: One object compresses what we write and decompresses what we read (spec 1.8).
        self._compression: StreamCompression | None = None
        max_frame = config.max_msg_size + _MESSAGE_OVERHEAD if config.max_msg_size > 0 else DEFAULT_MAX_FRAME
        self._max_frame = max_frame
        self._parser = FrameParser(max_frame)
        self._frames: deque[tuple[int, bytes]] = deque()
        #: Held until the handshake is done: bootstrap writes its own commands, in order.
        self._output = OutputBuffer(self._write_now, held=True)
        self._read_task: asyncio.Task[None] | None = None
        self._closed = False
        self._close_notified = False

    def __repr__(self) -> str:
        return f"NsqdConn({self.addr}, rdy={self.rdy}, in_flight={self.in_flight})"

    @property
    def is_closed(self) -> bool:
        return self._closed

    # --- bootstrap ------------------------------------------------------------------------------------

    async def connect(self) -> IdentifyResponse | None:
        """Dial and bootstrap; returns the IDENTIFY response (None when nsqd did not negotiate)."""
        host, port = split_host_port(self.addr)
        local: tuple[str, int] | None = None
        if self.config.local_addr:
            lhost, _, lport = self.config.local_addr.rpartition(":")
            local = (lhost.strip("[]"), int(lport)) if lhost else (self.config.local_addr, 0)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, local_addr=local, limit=READ_CHUNK),
                self.config.dial_timeout,
            )
        except (OSError, TimeoutError) as exc:
            self._closed = True
            raise NotConnectedError(f"dial {self.addr}: {exc or 'timed out'}") from exc
        self._reader, self._writer = reader, writer
        try:
            if self._closed:
                raise EOFError("closed while dialing")
            resp = await self._bootstrap(host)
            if self._closed:
                raise EOFError("closed during bootstrap")
        except BaseException as exc:
            self._closed = True
            writer.close()
            if isinstance(exc, OSError | EOFError | TimeoutError):
                raise NotConnectedError(f"{self.addr}: bootstrap failed: {exc or 'timed out'}") from exc
            if isinstance(exc, CompressionError):
                raise NSQClientError(f"{self.addr}: compressed stream broken: {exc}") from exc
            raise
        self._output.held = False
        self._output.flush()
        self._read_task = asyncio.create_task(self._read_loop(), name=f"nsq-read-{self.addr}")
        return resp

    def _identify_body(self) -> dict[str, Any]:
        c = self.config
        return {
            "client_id": c.client_id,
            "hostname": c.hostname,
            "user_agent": c.user_agent,
            "short_id": c.client_id,
            "long_id": c.hostname,
            "tls_v1": c.tls_v1,
            "deflate": c.deflate,
            "deflate_level": c.deflate_level,
            "snappy": c.snappy,
            "feature_negotiation": True,
            "heartbeat_interval": _ms(c.heartbeat_interval),
            "sample_rate": c.sample_rate,
            "output_buffer_size": c.output_buffer_size,
            "output_buffer_timeout": _ms(c.output_buffer_timeout),
            "msg_timeout": _ms(c.msg_timeout),
            "topology_region": c.topology_region,
            "topology_zone": c.topology_zone,
        }

    async def _bootstrap(self, host: str) -> IdentifyResponse | None:
        body = orjson.dumps(self._identify_body())
        self._write_now(MAGIC_V2 + encode_command("IDENTIFY", body=body))
        ftype, data = await self._next_frame()
        if ftype == FrameType.ERROR:
            raise ProtocolError.from_frame(data)
        if not data.startswith(b"{"):
            return None
        resp = IdentifyResponse.parse(data)
        self.identify = resp
        self.max_rdy_count = resp.max_rdy_count
        if resp.tls_v1:
            assert self._writer is not None
            await self._writer.start_tls(
                self.config.ssl_context(),
                server_hostname=host,
                ssl_handshake_timeout=self.config.read_timeout,
            )
            await self._expect_ok("TLS")
        if resp.deflate or resp.snappy:
            self._compression = Deflate(self.config.deflate_level) if resp.deflate else Snappy()
            await self._expect_ok("deflate" if resp.deflate else "snappy")
        if resp.auth_required:
            await self._authenticate()
        return resp

    async def _expect_ok(self, step: str) -> None:
        ftype, data = await self._next_frame()
        if ftype != FrameType.RESPONSE or data != OK:
            raise NSQClientError(f"{self.addr}: invalid response from {step} upgrade: {data[:200]!r}")

    async def _authenticate(self) -> None:
        if not self.config.auth_secret:
            raise AuthError(f"{self.addr}: nsqd requires AUTH but no auth_secret is configured")
        self._write_now(encode_command("AUTH", body=self.config.auth_secret.encode()))
        ftype, data = await self._next_frame()
        if ftype == FrameType.ERROR:
            raise ProtocolError.from_frame(data)
        try:
            raw = orjson.loads(data)
            self.auth = AuthResponse(
                str(raw.get("identity", "")),
                str(raw.get("identity_url", "")),
                int(raw.get("permission_count", 0)),
            )
        except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
            raise NSQClientError(f"{self.addr}: invalid AUTH response {data[:200]!r}") from None
        log.info(
            "%s: auth accepted, identity %r, %d permissions",
            self.addr,
            self.auth.identity,
            self.auth.permission_count,
        )

    async def _next_frame(self) -> tuple[int, bytes]:
        """One frame during bootstrap: exact reads while plaintext, decoded chunks once compressed."""
        assert self._reader is not None
        async with asyncio.timeout(self.config.read_timeout):
            if self._compression is None:
                raw = await self._reader.readexactly(4)
                (size,) = _SIZE.unpack(raw)
                self._check_size(size)
                payload = await self._reader.readexactly(size)
                return _SIZE.unpack_from(payload)[0], payload[4:]
            while not self._frames:
                chunk = await self._reader.read(READ_CHUNK)
                if not chunk:
                    raise EOFError("connection closed")
                self._frames.extend(self._feed(self._compression.decompress(chunk)))
            return self._frames.popleft()

    def _check_size(self, size: int) -> None:
        if size == HTTP_SIZE:
            raise NSQClientError(f"{self.addr} answers HTTP: that is nsqd's HTTP port, not its TCP port")
        if size < 4 or size > self._max_frame:
            raise NSQClientError(f"{self.addr}: frame size {size} out of range (max {self._max_frame})")

    def _feed(self, data: bytes) -> list[tuple[int, bytes]]:
        try:
            return self._parser.feed(data)
        except NSQError as exc:
            raise NSQClientError(f"{self.addr}: {exc.description}") from None

    # --- reading --------------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        assert self._reader is not None
        reader = self._reader
        timeout = self.config.read_timeout
        try:
            while self._frames and not self._closed:
                self._dispatch(*self._frames.popleft())
            while not self._closed:
                async with asyncio.timeout(timeout):
                    chunk = await reader.read(READ_CHUNK)
                if not chunk:
                    if not self._closed:
                        log.info("%s: connection closed by nsqd", self.addr)
                    break
                if self._compression is not None:
                    chunk = self._compression.decompress(chunk)
                for ftype, data in self._feed(chunk):
                    if self.is_closed:  # a delegate closed it: the rest is moot
                        break
                    self._dispatch(ftype, data)
        except asyncio.CancelledError:
            pass
        except TimeoutError:
            log.warning("%s: nothing read for %.1fs (read_timeout); closing", self.addr, timeout)
        except Exception as exc:  # a bad frame, a compression error, an I/O error: the connection is done
            log.warning("%s: closing after error: %s", self.addr, exc)
        finally:
            self._teardown()

    def _dispatch(self, ftype: int, data: bytes) -> None:
        if ftype == FrameType.RESPONSE:
            if data == HEARTBEAT:
                self._send_quietly(_NOP)
                return
            self.delegate.on_response(self, data)
        elif ftype == FrameType.MESSAGE:
            message = decode_message(data)
            self.in_flight += 1
            self.last_msg_time = self._loop.time()
            self.delegate.on_message(self, message)
        elif ftype == FrameType.ERROR:
            self.delegate.on_error(self, data)
        else:
            raise NSQClientError(f"unknown frame type {ftype}")

    # --- writing --------------------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Queue a command; everything queued in this loop iteration goes out in one write."""
        if self._closed:
            raise NotConnectedError(f"{self.addr}: connection closed")
        self._output.write(data)

    def _send_quietly(self, data: bytes) -> None:
        if not self._closed:
            self.send(data)

    def _write_now(self, data: Bytes) -> None:
        assert self._writer is not None
        if self._compression is not None:
            data = self._compression.compress(data)
        self._writer.write(data)

    @property
    def write_buffer_size(self) -> int:
        if self._writer is None or self._writer.transport.is_closing():
            return 0
        return int(self._writer.transport.get_write_buffer_size())

    async def drain(self) -> None:
        """Wait (up to ``write_timeout``) for the socket to take queued data; on timeout the conn closes."""
        self._output.flush()
        if self._writer is None or self._closed:
            return
        try:
            async with asyncio.timeout(self.config.write_timeout):
                await self._writer.drain()
        except (TimeoutError, OSError) as exc:
            log.warning("%s: write stalled (%s); closing", self.addr, exc or "write_timeout")
            self.close()
            raise NotConnectedError(f"{self.addr}: write failed") from exc

    # --- closing --------------------------------------------------------------------------------------

    def close(self) -> None:
        """Flush what is queued, close, and tell the delegate (once)."""
        if self._closed:
            return
        self._output.flush()
        self._closed = True
        if self._writer is not None:
            self._writer.close()
        task = self._read_task
        if task is None:
            self._close_notified = True  # never established: connect() raises instead
        elif not task.done() and task is not asyncio.current_task():
            task.cancel()

    def _teardown(self) -> None:
        self._closed = True
        if self._writer is not None and not self._writer.is_closing():
            self._output.clear()
            self._writer.close()
        if not self._close_notified:
            self._close_notified = True
            self.delegate.on_close(self)
