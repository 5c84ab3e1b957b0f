"""An asyncio NSQ producer that behaves like go-nsq's ``Producer`` (docs/protocols/nsq-client.md#producer).

One producer talks to one nsqd, connecting lazily on first use and again after a failure. Replies carry no
request ids, so every PUB/MPUB/DPUB gets a future in a FIFO and each non-heartbeat reply settles the oldest.
Publishing is pipelined: a publish only queues its command and its future, and everything queued in one loop
iteration leaves in one write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from tidemq.address import split_host_port
from tidemq.nsq.client.config import Config
from tidemq.nsq.client.conn import NsqdConn
from tidemq.nsq.client.errors import NotConnectedError, NSQClientError, ProtocolError, StoppedError
from tidemq.nsq.protocol import Message as Frame
from tidemq.nsq.protocol import encode_command, encode_mpub

log = logging.getLogger(__name__)

#: Beyond this many bytes waiting in the socket buffer, a publish waits for the socket to drain.
WRITE_HIGH_WATER = 4 * 1024 * 1024
_NOP = encode_command("NOP")


def _topic(topic: str) -> str:
    if not isinstance(topic, str) or any(c in topic for c in " \r\n\t"):
        raise ValueError(f"invalid topic name {topic!r}")
    return topic


def _body(body: bytes) -> bytes:
    if not isinstance(body, bytes | bytearray | memoryview):
        raise TypeError(f"message body must be bytes, not {type(body).__name__}")
    return bytes(body)


class Producer:
    """Publish to the nsqd at ``addr`` (``host:port``); ``options`` override fields of ``config``."""

    def __init__(self, addr: str, config: Config | None = None, **options: Any) -> None:
        split_host_port(addr)
        self.addr = addr
        self.config = (config or Config()).copy(**options)
        self._conn: NsqdConn | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._waiting: list[tuple[bytes, asyncio.Future[None]]] = []
        self._transactions: deque[asyncio.Future[None]] = deque()
        self._stopped = False
        self.last_error: BaseException | None = None

    def __repr__(self) -> str:
        return f"Producer({self.addr}, connected={self.is_connected})"

    @property
    def is_connected(self) -> bool:
        return self._conn is not None and not self._conn.is_closed

    # --- publishing -----------------------------------------------------------------------------------

    async def publish(self, topic: str, body: bytes) -> None:
        """PUB and wait for nsqd's OK; an error frame raises :class:`ProtocolError`."""
        await self._send(self.publish_async(topic, body))

    async def multi_publish(self, topic: str, bodies: Sequence[bytes]) -> None:
        await self._send(self.multi_publish_async(topic, bodies))

    async def deferred_publish(self, topic: str, delay: float, body: bytes) -> None:
        """DPUB: deliver after ``delay`` seconds (sent as whole milliseconds)."""
        await self._send(self.deferred_publish_async(topic, delay, body))

    def publish_async(self, topic: str, body: bytes) -> asyncio.Future[None]:
        """go-nsq's ``PublishAsync``: queue the PUB now, get a future for nsqd's answer."""
        return self._submit(encode_command("PUB", _topic(topic), body=_body(body)))

    def multi_publish_async(self, topic: str, bodies: Sequence[bytes]) -> asyncio.Future[None]:
        return self._submit(encode_mpub(_topic(topic), [_body(b) for b in bodies]))

    def deferred_publish_async(self, topic: str, delay: float, body: bytes) -> asyncio.Future[None]:
        if delay < 0 or not math.isfinite(delay):
            raise ValueError(f"deferred publish delay must be >= 0, got {delay}")
        return self._submit(encode_command("DPUB", _topic(topic), str(round(delay * 1000)), body=_body(body)))

    async def ping(self) -> None:
        """Connect if needed and send NOP (nsqd does not answer it)."""
        if self._stopped:
            raise StoppedError("producer stopped")
        conn = await self._connected()
        conn.send(_NOP)

    async def _send(self, future: asyncio.Future[None]) -> None:
        conn = self._conn
        if conn is not None and conn.write_buffer_size > WRITE_HIGH_WATER:
            with contextlib.suppress(NotConnectedError):
                await conn.drain()
        await future

    def _submit(self, data: bytes) -> asyncio.Future[None]:
        if self._stopped:
            raise StoppedError("producer stopped")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        conn = self._conn
        if conn is not None and not conn.is_closed:
            self._transactions.append(future)
            conn.send(data)
        else:
            self._waiting.append((data, future))
            self._start_connecting()
        return future

    # --- connection -----------------------------------------------------------------------------------

    def _start_connecting(self) -> asyncio.Task[None]:
        if self._connecting is None:
            self._connecting = asyncio.create_task(self._connect(), name=f"nsq-producer-connect-{self.addr}")
        return self._connecting

    async def _connected(self) -> NsqdConn:
        conn = self._conn
        if conn is not None and not conn.is_closed:
            return conn
        await asyncio.shield(self._start_connecting())
        conn = self._conn
        if conn is None or conn.is_closed:
            if isinstance(self.last_error, NSQClientError):
                raise self.last_error
            raise NotConnectedError(f"{self.addr}: not connected")
        return conn

    async def _connect(self) -> None:
        conn = NsqdConn(self.addr, self.config, self)
        log.info("(%s) connecting to nsqd", self.addr)
        try:
            await conn.connect()
            if self._stopped and not self._waiting:
                conn.close()
                raise StoppedError("producer stopped")
        except (Exception, asyncio.CancelledError) as exc:  # a task boundary: every waiter must hear of it
            self._connecting = None
            error: BaseException = exc
            if isinstance(exc, asyncio.CancelledError):
                error = StoppedError("producer stopped")
            elif not isinstance(exc, NSQClientError):
                error = NotConnectedError(f"{self.addr}: {exc!r}")
            self.last_error = error
            log.error("(%s) error connecting to nsqd - %s", self.addr, error)
            self._fail((future for _, future in self._drain_waiting()), error)
            return
        self._connecting = None
        self._conn = conn
        self.last_error = None
        for data, future in self._drain_waiting():
            self._transactions.append(future)
            conn.send(data)

    def _drain_waiting(self) -> list[tuple[bytes, asyncio.Future[None]]]:
        waiting, self._waiting = self._waiting, []
        return waiting

    @staticmethod
    def _fail(futures: Iterable[asyncio.Future[None]], error: BaseException) -> None:
        for future in futures:
            if not future.done():
                future.set_exception(error)

    # --- ConnDelegate ---------------------------------------------------------------------------------

    def _answered(self, conn: NsqdConn, what: str, data: bytes) -> asyncio.Future[None] | None:
        """The oldest publish, which this reply answers; None for a stale connection or a reply to nothing
        (which closes the connection: the pairing of replies to publishes is lost)."""
        if conn is not self._conn:
            return None
        if not self._transactions:
            log.error("(%s) %s %r with nothing outstanding; closing", self.addr, what, data[:100])
            conn.close()
            return None
        return self._transactions.popleft()

    def on_response(self, conn: NsqdConn, data: bytes) -> None:
        future = self._answered(conn, "response", data)
        if future is not None and not future.done():
            future.set_result(None)

    def on_error(self, conn: NsqdConn, data: bytes) -> None:
        future = self._answered(conn, "error", data)
        if future is None:
            return
        error = ProtocolError.from_frame(data)
        if not future.done():
            future.set_exception(error)
        if error.fatal:
            # nsqd closes after a fatal error and ignores what was pipelined behind it: reconnect for more
            conn.close()

    def on_message(self, conn: NsqdConn, message: Frame) -> None:
        log.error("(%s) producer received a message frame; closing", self.addr)
        conn.close()

    def on_close(self, conn: NsqdConn) -> None:
        if conn is not self._conn:
            return
        self._conn = None
        outstanding, self._transactions = self._transactions, deque()
        error = (
            StoppedError("producer stopped") if self._stopped else NotConnectedError(f"{self.addr}: closed")
        )
        if outstanding:
            log.warning("(%s) connection closed with %d publishes unanswered", self.addr, len(outstanding))
        self._fail(outstanding, error)

    # --- stopping -------------------------------------------------------------------------------------

    async def stop(self, timeout: float = 5.0) -> None:
        """Refuse new publishes, give outstanding ones up to ``timeout`` to be answered, then close."""
        if self._stopped:
            return
        self._stopped = True
        outstanding = [future for _, future in self._waiting] + list(self._transactions)
        if outstanding:
            await asyncio.wait(outstanding, timeout=timeout)
        if self._connecting is not None:
            self._connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._connecting
        conn = self._conn
        if conn is not None:
            conn.close()
            self.on_close(conn)  # settle what is left now rather than when the read task winds down
        self._fail((future for _, future in self._drain_waiting()), StoppedError("producer stopped"))

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
