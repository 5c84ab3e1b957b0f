"""One client connection to nsqd (go-nsq ``conn.go``; docs/protocols/nsq-tcp.md,
docs/protocols/nsq-client.md#connection).

The connection is the socket's asyncio protocol: no stream buffer or read task between a read and its parse.

Bootstrap: dial, magic, IDENTIFY, then the upgrades nsqd grants in its order (TLS, then snappy or deflate,
each confirmed by an ``OK``), then AUTH when required. Until then received bytes are only collected and
taken a frame at a time, so compressed bytes that arrived behind the plaintext IDENTIFY reply are still raw
when compression starts and are the first thing decompressed (docs/protocols/nsq-tcp.md#upgrades: "leftover
bytes").

After bootstrap each read is parsed and handed to the delegate synchronously: heartbeats are answered with
NOP on the spot and message handling never blocks reading. A consumer's reads become client messages
directly, one list per read. Writes are queued and flushed once per loop iteration, so pipelined commands
(and a burst of FINs, built as one block) share one (compressed) write.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import deque
from typing import Protocol, cast

from tidemq.address import split_host_port
from tidemq.aio import BufferedReceiver, Bytes, OutputBuffer
from tidemq.nsq.client.config import Config
from tidemq.nsq.client.conn_state import TRANSITIONS, ConnEvent, ConnState, notifies
from tidemq.nsq.client.errors import AuthError, NotConnectedError, NSQClientError, ProtocolError
from tidemq.nsq.client.message import Message as ClientMessage
from tidemq.nsq.client.message import MessageDelegate
from tidemq.nsq.client.negotiation import AuthResponse, IdentifyResponse, identify_body
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

#: A size prefix of ASCII "HTTP": the address is an HTTP port (spec pitfall 18).
HTTP_SIZE = struct.unpack(">i", b"HTTP")[0]
DEFAULT_MAX_FRAME = 64 * 1024 * 1024
_MESSAGE_OVERHEAD = 4 + 26
_NOP = encode_command("NOP")
_SIZE = struct.Struct(">i")
_FRAME_HEAD = struct.Struct(">ii")
_LIVE, _CLOSED, _TORN_DOWN = ConnState.LIVE, ConnState.CLOSED, ConnState.TORN_DOWN


class ConnDelegate(Protocol):
    """What the owner (consumer or producer) hears from a connection; called on the event loop."""

    def on_message(self, conn: NsqdConn, message: Message) -> None: ...

    def on_response(self, conn: NsqdConn, data: bytes) -> None: ...

    def on_error(self, conn: NsqdConn, data: bytes) -> None: ...

    def on_close(self, conn: NsqdConn) -> None: ...


class ConsumerDelegate(ConnDelegate, MessageDelegate, Protocol):
    """A consumer: gets each read's messages as one list, already bound to itself for their responses."""

    def on_messages(self, conn: NsqdConn, messages: list[ClientMessage]) -> None: ...


class NsqdConn(BufferedReceiver):
    """A connection to one nsqd. The RDY bookkeeping fields belong to the consumer that owns it.

    With ``consumer`` set, each read's message frames reach ``consumer.on_messages`` as client messages.
    Any other message frame (a producer's, or one decoded during bootstrap) reaches ``delegate.on_message``
    as a decoded frame.

    Its life (connecting, bootstrapped, live, closed, torn down) is a ``ConnState``, moved only by
    ``_move`` along ``conn_state.TRANSITIONS``.
    """

    def __init__(
        self, addr: str, config: Config, delegate: ConnDelegate, consumer: ConsumerDelegate | None = None
    ) -> None:
        self.addr = addr
        self.config = config
        self.delegate = delegate
        self._consumer = consumer
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
        self._transport: asyncio.Transport | None = None
        #: One object compresses what we write and decompresses what we read
        #: (docs/protocols/nsq-tcp.md#upgrades).
        self._compression: StreamCompression | None = None
        max_frame = config.max_msg_size + _MESSAGE_OVERHEAD if config.max_msg_size > 0 else DEFAULT_MAX_FRAME
        self._max_frame = max_frame
        self._parser = FrameParser(max_frame)
        #: Bootstrap: bytes received but not yet taken, frames decoded but not yet taken, who waits for them.
        self._raw = bytearray()
        self._frames: deque[tuple[int, bytes]] = deque()
        self._waiter: asyncio.Future[None] | None = None
        #: Held until the handshake is done: bootstrap writes its own commands, in order.
        self._output = OutputBuffer(self._write_now, held=True)
        #: IDs of FINs not yet in ``_output``: they join it as one block before anything else is queued.
        self._fins: list[bytes] = []
        self._paused = False
        self._drainers: list[asyncio.Future[None]] = []
        self._last_read = 0.0
        self._watchdog: asyncio.TimerHandle | None = None
        #: Where the connection is in its life (conn_state.py); it moves only through ``_move``.
        self._state = ConnState.CONNECTING
        #: asyncio reported the socket gone; what that means depends on the state (conn_state.py).
        self._lost = False

    def __repr__(self) -> str:
        return f"NsqdConn({self.addr}, rdy={self.rdy}, in_flight={self.in_flight})"

    @property
    def state(self) -> ConnState:
        return self._state

    @property
    def is_closed(self) -> bool:
        """Closed or torn down (``conn_state.ENDED``): nothing more is sent or delivered."""
        state = self._state
        return state is not _LIVE and (state is _CLOSED or state is _TORN_DOWN)

    def _move(self, event: ConnEvent) -> None:
        self._state = TRANSITIONS.advance(self._state, event)

    # --- bootstrap ------------------------------------------------------------------------------------

    async def connect(self) -> IdentifyResponse | None:
        """Dial and bootstrap; returns the IDENTIFY response (None when nsqd did not negotiate)."""
        host, port = split_host_port(self.addr)
        local: tuple[str, int] | None = None
        if self.config.local_addr:
            lhost, _, lport = self.config.local_addr.rpartition(":")
            local = (lhost.strip("[]"), int(lport)) if lhost else (self.config.local_addr, 0)
        try:
            await asyncio.wait_for(
                self._loop.create_connection(lambda: self, host, port, local_addr=local),
                self.config.dial_timeout,
            )
        except (OSError, TimeoutError) as exc:
            self._move(ConnEvent.CONNECT_FAILED)
            raise NotConnectedError(f"dial {self.addr}: {exc or 'timed out'}") from exc
        try:
            if self.is_closed:
                raise EOFError("closed while dialing")
            resp = await self._bootstrap(host)
            if self.is_closed:
                raise EOFError("closed during bootstrap")
        except BaseException as exc:
            self._move(ConnEvent.CONNECT_FAILED)
            if self._transport is not None:
                self._transport.close()
            if isinstance(exc, OSError | EOFError | TimeoutError):
                raise NotConnectedError(f"{self.addr}: bootstrap failed: {exc or 'timed out'}") from exc
            if isinstance(exc, CompressionError):
                raise NSQClientError(f"{self.addr}: compressed stream broken: {exc}") from exc
            raise
        self._move(ConnEvent.BOOTSTRAP_DONE)
        self._output.held = False
        self._output.flush()
        self._last_read = self._loop.time()
        self._watchdog = self._loop.call_later(self.config.read_timeout, self._check_read)
        self._loop.call_soon(self._go_live)
        return resp

    async def _bootstrap(self, host: str) -> IdentifyResponse | None:
        self._write_now(MAGIC_V2 + encode_command("IDENTIFY", body=identify_body(self.config)))
        ftype, data = await self._next_frame()
        if ftype == FrameType.ERROR:
            raise ProtocolError.from_frame(data)
        if not data.startswith(b"{"):
            return None
        resp = IdentifyResponse.parse(data)
        self.identify = resp
        self.max_rdy_count = resp.max_rdy_count
        if resp.tls_v1:
            assert self._transport is not None
            transport = await self._loop.start_tls(
                self._transport,
                self,
                self.config.ssl_context(),
                server_hostname=host,
                ssl_handshake_timeout=self.config.read_timeout,
            )
            if transport is None:
                raise EOFError("connection closed during the TLS handshake")
            self._transport = transport
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
        self.auth = AuthResponse.parse(data)
        log.info(
            "%s: auth accepted, identity %r, %d permissions",
            self.addr,
            self.auth.identity,
            self.auth.permission_count,
        )

    async def _next_frame(self) -> tuple[int, bytes]:
        """One frame during bootstrap, waiting (up to ``read_timeout``) for the bytes to arrive."""
        async with asyncio.timeout(self.config.read_timeout):
            while True:
                frame = self._take_frame()
                if frame is not None:
                    return frame
                if self._lost or self.is_closed:
                    raise EOFError("connection closed")
                self._waiter = self._loop.create_future()
                try:
                    await self._waiter
                finally:
                    self._waiter = None

    def _take_frame(self) -> tuple[int, bytes] | None:
        """Exactly one plaintext frame from the raw bytes; once compressed, everything is decoded."""
        raw = self._raw
        if self._compression is None:
            if len(raw) < 4:
                return None
            (size,) = _SIZE.unpack_from(raw)
            self._check_size(size)
            if len(raw) < 4 + size:
                return None
            frame = (_FRAME_HEAD.unpack_from(raw)[1], bytes(raw[8 : 4 + size]))
            del raw[: 4 + size]
            return frame
        if raw:
            chunk = bytes(raw)
            raw.clear()
            self._frames.extend(self._feed(self._compression.decompress(chunk)))
        return self._frames.popleft() if self._frames else None

    def _check_size(self, size: int) -> None:
        if size == HTTP_SIZE:
            raise NSQClientError(f"{self.addr} answers HTTP: that is nsqd's HTTP port, not its TCP port")
        if size < 4 or size > self._max_frame:
            raise NSQClientError(f"{self.addr}: frame size {size} out of range (max {self._max_frame})")

    def _feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """Bootstrap's parse: its errors leave ``connect`` as client errors. Once live, any error a read
        raises (protocol, compression) is logged with the address and closes the connection."""
        try:
            return self._parser.feed(data)
        except NSQError as exc:
            raise NSQClientError(f"{self.addr}: {exc.description}") from None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # --- asyncio.BufferedProtocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's does not subclass it

    def data_received(self, data: memoryview) -> None:
        if self._state is not _LIVE:
            if not self.is_closed:  # the handshake, or the pass that goes live, takes it
                self._raw += data
                self._wake()
            return
        self._last_read = self._loop.time()
        try:
            self._receive(data)
        except Exception as exc:  # a bad frame, a compression error: the connection is done
            self._drop(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._wake()
        self._wake_drainers()
        if self._state is _LIVE:
            self._drop(exc)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_drainers()

    # --- reading --------------------------------------------------------------------------------------

    def _go_live(self) -> None:
        """Bootstrap is over: deliver what arrived behind it, then every read as it comes."""
        if self._state is not ConnState.BOOTSTRAPPED:  # closed meanwhile
            return
        self._move(ConnEvent.GO_LIVE)
        try:
            while self._frames and self._state is _LIVE:
                self._dispatch(*self._frames.popleft())
            if self._raw and self._state is _LIVE:
                raw = bytes(self._raw)
                self._raw.clear()
                self._receive(raw)
        except Exception as exc:
            self._drop(exc)
            return
        if self._lost and self._state is _LIVE:
            self._drop(None)

    def _receive(self, data: bytes | memoryview) -> None:
        if self._compression is not None:
            data = self._compression.decompress(data)
        consumer = self._consumer
        if consumer is not None:
            self._take_messages(data, consumer)
            return
        for ftype, payload in self._parser.feed(data):
            if self._state is not _LIVE:  # a delegate closed it: the rest is moot
                break
            self._dispatch(ftype, payload)

    def _check_read(self) -> None:
        """The ``read_timeout`` watchdog: one timer per timeout period, not one per read."""
        self._watchdog = None
        if self.is_closed:
            return
        timeout = self.config.read_timeout
        deadline = self._last_read + timeout
        if self._loop.time() >= deadline - 0.001:
            log.warning("%s: nothing read for %.1fs (read_timeout); closing", self.addr, timeout)
            self._teardown()
            return
        self._watchdog = self._loop.call_at(deadline, self._check_read)

    def _take_messages(self, chunk: bytes | memoryview, consumer: ConsumerDelegate) -> None:
        """One read for a consumer: its messages in batches, other frames in their place between them."""
        messages, others = self._parser.feed_messages(chunk, ClientMessage, self, consumer)
        if not others:
            if messages:
                self._deliver(messages, consumer)
            return
        done = 0
        for before, ftype, data in others:
            if before > done:
                if self._state is not _LIVE:
                    return
                self._deliver(messages[done:before], consumer)
                done = before
            if self._state is not _LIVE:
                return
            self._dispatch(ftype, data)
        if done < len(messages) and self._state is _LIVE:
            self._deliver(messages[done:], consumer)

    def _deliver(self, messages: list[ClientMessage], consumer: ConsumerDelegate) -> None:
        self.in_flight += len(messages)
        self.last_msg_time = self._loop.time()
        consumer.on_messages(self, messages)

    def _dispatch(self, ftype: int, data: bytes) -> None:
        if ftype == FrameType.RESPONSE:
            if data == HEARTBEAT:
                self._send_quietly(_NOP)
                return
            self.delegate.on_response(self, data)
        elif ftype == FrameType.MESSAGE:
            frame = decode_message(data)
            self.in_flight += 1
            self.last_msg_time = self._loop.time()
            self.delegate.on_message(self, frame)
        elif ftype == FrameType.ERROR:
            self.delegate.on_error(self, data)
        else:
            raise NSQClientError(f"unknown frame type {ftype}")

    # --- writing --------------------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Queue a command; everything queued in this loop iteration goes out in one write."""
        if self._state is not _LIVE and self.is_closed:
            raise NotConnectedError(f"{self.addr}: connection closed")
        if self._fins:
            self._queue_fins()
        self._output.write(data)

    def send_fin(self, msg_id: bytes) -> None:
        """Queue ``FIN msg_id``, in order with :meth:`send`; a burst of FINs is built as one block."""
        if self._state is not _LIVE and self.is_closed:
            raise NotConnectedError(f"{self.addr}: connection closed")
        fins = self._fins
        if not fins:
            self._loop.call_soon(self._flush_fins)
        fins.append(msg_id)

    def _queue_fins(self) -> None:
        fins = self._fins
        self._output.write(b"FIN " + b"\nFIN ".join(fins) + b"\n")
        fins.clear()

    def _flush_fins(self) -> None:
        if self._fins and not self.is_closed:
            self._queue_fins()
            self._output.flush()

    def _send_quietly(self, data: bytes) -> None:
        if not self.is_closed:
            self.send(data)

    def _write_now(self, data: Bytes) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if self._compression is not None:
            data = self._compression.compress(data)
        transport.write(data)

    @property
    def write_buffer_size(self) -> int:
        if self._transport is None or self._transport.is_closing():
            return 0
        return int(self._transport.get_write_buffer_size())

    async def drain(self) -> None:
        """Wait (up to ``write_timeout``) for the socket to take queued data; on timeout the conn closes."""
        self._flush_fins()
        self._output.flush()
        if self._transport is None or self.is_closed or not self._paused:
            return
        try:
            async with asyncio.timeout(self.config.write_timeout):
                while self._paused and not self.is_closed and not self._lost:
                    waiter = self._loop.create_future()
                    self._drainers.append(waiter)
                    await waiter
        except TimeoutError as exc:
            log.warning("%s: write stalled (write_timeout); closing", self.addr)
            self.close()
            raise NotConnectedError(f"{self.addr}: write failed") from exc
        if self._lost:
            raise NotConnectedError(f"{self.addr}: connection lost while writing")

    def _wake_drainers(self) -> None:
        drainers, self._drainers = self._drainers, []
        for waiter in drainers:
            if not waiter.done():
                waiter.set_result(None)

    # --- closing --------------------------------------------------------------------------------------

    def close(self) -> None:
        """Flush what is queued, close, and tell the delegate (once, on the next loop pass; never while
        connecting: ``connect()`` raises instead)."""
        if self.is_closed:
            return
        self._flush_fins()
        self._output.flush()
        self._move(ConnEvent.CLOSE)
        self._stop_watchdog()
        if self._transport is not None:
            self._transport.close()
        self._wake()
        self._wake_drainers()
        if self._state is ConnState.CLOSED:
            self._loop.call_soon(self._teardown)

    def _teardown(self) -> None:
        notify = notifies(self._state, ConnEvent.TEARDOWN)
        self._move(ConnEvent.TEARDOWN)
        self._stop_watchdog()
        self._wake_drainers()
        transport = self._transport
        if transport is not None and not transport.is_closing():
            self._output.clear()
            self._fins.clear()
            transport.close()
        if notify:
            self.delegate.on_close(self)

    def _drop(self, exc: BaseException | None) -> None:
        """The connection is done under us: nsqd closed it (``exc`` None) or a read failed."""
        if exc is None:
            log.info("%s: connection closed by nsqd", self.addr)
        else:
            log.warning("%s: closing after error: %s", self.addr, exc)
        self._teardown()

    def _stop_watchdog(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
