"""asyncio transport for remoting: one connection type used by servers and clients alike.

Every connection both matches responses to its own requests by opaque and dispatches the peer's
requests to a handler, because brokers call clients back on the connection the client opened.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

from tidemq.aio import BufferedReceiver, Bytes, OutputBuffer, TaskSet, cancel_and_wait
from tidemq.connection_gate import ConnectionGate, ConnectionLimits, RateLimitedLog
from tidemq.remoting.bodies import BodyError
from tidemq.remoting.codes import FLAG_ONEWAY, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.frame import MAX_FRAME_LENGTH, FrameDecoder, FrameError, HeaderError, encode_parts
from tidemq.remoting.headers import HeaderFieldError

log = logging.getLogger(__name__)
#: Connections refused past the caps: RocketMQ has no refusal frame, so the socket is closed and the
#: refusal logged, a few lines a second however many are refused.
refusals = RateLimitedLog(log, 5)
#: Requests whose body has the wrong shape: one line each, a few a second, so a client sending garbage in a
#: loop costs the log almost nothing.
bad_bodies = RateLimitedLog(log, 5)

#: A timer may run a hair before its deadline by the loop's clock; what is this close counts as expired.
_EXPIRY_SLACK_S = 0.001
#: Answers queued for one connection, in bytes, past which its further requests wait until the peer has
#: read (docs/rocketmq-broker.md#connection-limits). Netty's channel stops being writable at 64 KiB; one
#: pull answer can be a few MiB, so the bound is one maximum-size message (maxMessageSize, 4 MiB).
WRITE_HIGH_WATER = 4 * 1024 * 1024
#: Requests of one connection handled per loop pass; the rest wait (reading paused) for the next pass, so
#: a peer pipelining thousands of requests in one read does not hold up everyone else for all of them.
REQUESTS_PER_PASS = 256
#: A peer that has read nothing of what it asked for this long is closed (a slow consumer).
SLOW_PEER_TIMEOUT_S = 120.0

ProcessorResult = RemotingCommand | None | Awaitable[RemotingCommand | None]
Processor = Callable[["RemotingConnection", RemotingCommand], ProcessorResult]
#: Runs before any processor; a response refuses the request, ``None`` lets it through (Java's RPCHook).
Guard = Callable[["RemotingConnection", RemotingCommand], RemotingCommand | None]
#: Runs on every request a connection sends, before it is encoded (a client's signing hook).
RequestHook = Callable[[RemotingCommand], None]


class RemotingError(Exception):
    """A remoting call failed before a response arrived."""


class RemotingConnectError(RemotingError):
    pass


class RemotingTimeoutError(RemotingError):
    pass


class RemotingClosedError(RemotingError):
    pass


class RequestDispatcher:
    """Maps request codes to processors: small functions that take a request and give a response.

    A processor returns the response, ``None`` (no answer, for oneway requests), or an awaitable of
    either when it must wait (long polling, group commit).
    """

    def __init__(self) -> None:
        self._processors: dict[int, Processor] = {}
        self._guards: list[Guard] = []

    def add_guard(self, guard: Guard) -> None:
        """Check every request before its processor (access control), in one place for all codes."""
        self._guards.append(guard)

    def register(self, code: int, processor: Processor) -> None:
        self._processors[code] = processor

    def codes(self) -> list[int]:
        return sorted(self._processors)

    def __call__(self, conn: RemotingConnection, request: RemotingCommand) -> ProcessorResult:
        for guard in self._guards:
            refusal = guard(conn, request)
            if refusal is not None:
                return refusal
        processor = self._processors.get(request.code)
        if processor is None:
            return request.error(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported"
            )
        return processor(conn, request)


class RemotingConnection(BufferedReceiver):
    """One remoting connection; see the module docstring.

    It keeps no lifecycle flags of its own: it is open until its asyncio transport is closing
    (``is_closed``), and ``closed`` resolves once the socket is gone.
    """

    def __init__(
        self,
        handler: Processor | None = None,
        *,
        on_close: Callable[[RemotingConnection], None] | None = None,
        max_frame: int = MAX_FRAME_LENGTH,
        request_hook: RequestHook | None = None,
        on_open: Callable[[RemotingConnection], bool] | None = None,
        slow_peer_timeout_s: float = SLOW_PEER_TIMEOUT_S,
    ) -> None:
        # Without a handler every request is answered "not supported", as by an empty dispatcher.
        self._handler = handler if handler is not None else RequestDispatcher()
        self._on_close = on_close
        #: Asked once the peer is known whether it may stay (a server's connection caps).
        self._on_open = on_open
        self._slow_peer_timeout_s = slow_peer_timeout_s
        self._request_hook = request_hook
        self._decoder = FrameDecoder(max_frame)
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        #: opaque -> (deadline on the loop's clock, request code, timeout) of requests being waited for.
        self._deadlines: dict[int, tuple[float, int, float]] = {}
        self._expiry: asyncio.TimerHandle | None = None  # armed for the earliest deadline
        self._opaque = itertools.count(1)
        self._transport: asyncio.Transport | None = None
        self._tasks = TaskSet()  # answers still being worked out
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._output = OutputBuffer(self._write)
        #: Bytes handed to ``send`` and not yet given to the transport.
        self._unflushed = 0
        #: Requests read but not yet dispatched, because what is queued for the peer passed the bound or
        #: this loop pass's budget (REQUESTS_PER_PASS) is spent.
        self._backlog: collections.deque[RemotingCommand] = collections.deque()
        self._backlog_scheduled = False
        self._slow_peer: asyncio.TimerHandle | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.peer: tuple[str, int] = ("", 0)
        self.local: tuple[str, int] = ("", 0)
        self.last_activity = time.monotonic()
        #: Free slot for the layer above (client registry, broker info) to hang its own state on.
        self.attrs: dict[str, Any] = {}

    # --- asyncio.BufferedProtocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        peer = transport.get_extra_info("peername")
        local = transport.get_extra_info("sockname")
        if peer:
            self.peer = (peer[0], peer[1])
        if local:
            self.local = (local[0], local[1])
        if self._on_open is not None and not self._on_open(self):
            self._transport.abort()

    def data_received(self, data: memoryview) -> None:
        self.last_activity = time.monotonic()
        try:
            commands = self._decoder.feed(data)
        except FrameError as exc:
            log.warning("closing %s: %s", self.address, exc)
            self.close()
            return
        budget = REQUESTS_PER_PASS
        for cmd in commands:
            if isinstance(cmd, HeaderError):
                self._bad_header(cmd)
            elif cmd.is_response:
                fut = self._pending.pop(cmd.opaque, None)
                if self._deadlines:
                    self._deadlines.pop(cmd.opaque, None)
                if fut is not None and not fut.done():
                    fut.set_result(cmd)
            elif self._backlog or not budget or self._over_high_water():
                self._park(cmd)
            else:
                self._dispatch(cmd)
                budget -= 1

    # --- output bound: a peer that does not read stops being served ---------------------------------

    def _over_high_water(self) -> bool:
        queued = self._unflushed
        if self._transport is not None:
            queued += self._transport.get_write_buffer_size()
        return queued >= WRITE_HIGH_WATER

    def _park(self, request: RemotingCommand) -> None:
        """Keep a request until the peer has read its earlier answers, or for the next loop pass when this
        one's budget is spent; read nothing more meanwhile."""
        if not self._backlog and self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()
            self._output.flush()
        self._backlog.append(request)
        self._schedule_backlog()

    def _schedule_backlog(self) -> None:
        if not self._backlog_scheduled and self._can_write.is_set():
            self._backlog_scheduled = True
            asyncio.get_running_loop().call_soon(self._run_backlog)

    def _run_backlog(self) -> None:
        """Dispatch parked requests while the output stays under the bound (on a later loop pass, once
        what was queued has gone to the socket), up to a pass's budget."""
        self._backlog_scheduled = False
        if self.is_closed:
            self._backlog.clear()
            return
        budget = REQUESTS_PER_PASS
        while self._backlog and self._can_write.is_set():
            if self._over_high_water():
                self._output.flush()
                if self._over_high_water():
                    self._schedule_backlog()  # pause_writing may stop it; resume_writing restarts it
                    return
            if not budget:
                self._schedule_backlog()
                return
            self._dispatch(self._backlog.popleft())
            budget -= 1
        if not self._backlog and self._can_write.is_set():
            self._transport.resume_reading()  # type: ignore[union-attr]

    def eof_received(self) -> bool | None:
        # A half-closed peer sends nothing more; answers still in flight would go nowhere useful.
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(RemotingClosedError(f"connection to {self.address} closed"))
        self._pending.clear()
        self._deadlines.clear()
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        for task in self._tasks:
            task.cancel()
        self._backlog.clear()
        if self._slow_peer is not None:
            self._slow_peer.cancel()
            self._slow_peer = None
        self._can_write.set()
        if not self.closed.done():
            self.closed.set_result(None)
        if self._on_close is not None:
            self._on_close(self)

    def pause_writing(self) -> None:
        # The peer is not reading: stop reading its requests too, so it cannot make us buffer forever,
        # and close it if it stays so (a slow consumer).
        self._can_write.clear()
        if self._transport is not None:
            self._transport.pause_reading()
        if self._slow_peer is None:
            self._slow_peer = asyncio.get_running_loop().call_later(
                self._slow_peer_timeout_s, self._close_slow_peer
            )

    def resume_writing(self) -> None:
        self._can_write.set()
        if self._slow_peer is not None:
            self._slow_peer.cancel()
            self._slow_peer = None
        if self._transport is not None and not self._transport.is_closing():
            if self._backlog:
                self._schedule_backlog()
            else:
                self._transport.resume_reading()

    def _close_slow_peer(self) -> None:
        self._slow_peer = None
        log.warning("closing %s: it read nothing for %g s", self.address, self._slow_peer_timeout_s)
        self.abort()

    # --- requests from the peer ---------------------------------------------------------------------

    def _bad_header(self, exc: HeaderError) -> None:
        if exc.opaque is None:
            log.warning("closing %s: %s", self.address, exc)
            self.close()
        elif not exc.flag & FLAG_ONEWAY:
            self.send(RemotingCommand(ResponseCode.SYSTEM_ERROR, opaque=exc.opaque, flag=1, remark=str(exc)))

    def _dispatch(self, request: RemotingCommand) -> None:
        try:
            result = self._handler(self, request)
        except Exception as exc:
            self._reply(request, self.failure_response(request, exc))
            return
        if result is None or isinstance(result, RemotingCommand):  # what most requests get: an answer now
            self._reply(request, result)
        elif isinstance(result, asyncio.Future) and not isinstance(result, asyncio.Task):
            # An answer to come (a send under sync flush): a callback, where a task would cost more than
            # the rest of the send. A task stays a task, cancelled with the connection.
            result.add_done_callback(functools.partial(self._reply_when_done, request))
        else:
            self._tasks.spawn(self._await_reply(request, result))

    def _reply_when_done(
        self, request: RemotingCommand, answer: asyncio.Future[RemotingCommand | None]
    ) -> None:
        if answer.cancelled():
            return
        failure = answer.exception()
        if failure is None:
            self._reply(request, answer.result())
        elif isinstance(failure, Exception):
            self._reply(request, self.failure_response(request, failure))
        else:
            raise failure

    async def _await_reply(
        self, request: RemotingCommand, pending: Awaitable[RemotingCommand | None]
    ) -> None:
        try:
            response = await pending
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            response = self.failure_response(request, exc)
        self._reply(request, response)

    def failure_response(self, request: RemotingCommand, exc: Exception) -> RemotingCommand:
        """The answer to a request whose processor raised (logged unless the request itself was bad)."""
        if isinstance(exc, BodyError):
            # Java answers a body fastjson cannot decode with SYSTEM_ERROR and a one-line description.
            bad_bodies.warning("refused request %s from %s: %s", request.code, self.address, exc)
            return request.error(ResponseCode.SYSTEM_ERROR, str(exc))
        if isinstance(exc, HeaderFieldError | ValueError):
            return request.error(ResponseCode.SYSTEM_ERROR, f"bad request {request.code}: {exc}")
        log.exception("processor for code %s failed", request.code)
        return request.error(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")

    def _reply(self, request: RemotingCommand, response: RemotingCommand | None) -> None:
        if response is not None and not request.is_oneway:
            response.opaque = request.opaque
            self.send(response)

    def reply_now(self, request: RemotingCommand, response: RemotingCommand | None) -> None:
        """Answer a request whose processor returned ``None`` and kept it (a held pull), writing at once
        with whatever else is queued: the peer is waiting on it, so it does not wait for this loop pass."""
        self._reply(request, response)
        self._output.flush()

    # --- our requests -------------------------------------------------------------------------------

    @property
    def address(self) -> str:
        return f"{self.peer[0]}:{self.peer[1]}"

    @property
    def is_closed(self) -> bool:
        return self._transport is None or self._transport.is_closing()

    def send(self, cmd: RemotingCommand) -> None:
        """Write a command now; frames that cannot be encoded are reported, not sent."""
        if self._transport is None or self._transport.is_closing():
            return
        try:
            head, body = encode_parts(cmd)
        except FrameError as exc:
            log.error("dropping command to %s: %s", self.address, exc)
            if cmd.is_response:
                self.send(
                    RemotingCommand(ResponseCode.SYSTEM_ERROR, opaque=cmd.opaque, flag=1, remark=str(exc))
                )
            return
        self.last_activity = time.monotonic()
        self._unflushed += len(head) + len(body)
        self._output.write(head)
        if body:
            self._output.write(body)

    def _write(self, data: Bytes) -> None:
        self._unflushed = 0
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    async def invoke(self, request: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Send a request and wait for its response."""
        return await self.answer(request, self.start_invoke(request), timeout)

    def start_invoke(self, request: RemotingCommand) -> asyncio.Future[RemotingCommand]:
        """Queue the request for this loop pass's write and return its response future, without waiting:
        a caller can get the next request onto the wire before it does slow work (a pull consumer decoding
        the previous answer), then collect the answer with ``answer``."""
        if self.is_closed:
            raise RemotingClosedError(f"connection to {self.address} is closed")
        request.opaque = next(self._opaque)
        if self._request_hook is not None:
            self._request_hook(request)
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[request.opaque] = fut
        self.send(request)
        return fut

    async def answer(
        self, request: RemotingCommand, fut: asyncio.Future[RemotingCommand], timeout: float
    ) -> RemotingCommand:
        """The response ``start_invoke`` promised, or RemotingTimeoutError after ``timeout`` seconds.

        The deadline goes into the connection's table instead of a timer per request (as Java's
        response table is scanned): one timer, armed for the earliest deadline, fails what has expired.
        A timer set and cancelled per request was a tenth of a pull consumer's CPU.
        """
        opaque = request.opaque
        self._watch(request, timeout)
        try:
            return await fut
        finally:
            self._pending.pop(opaque, None)
            self._deadlines.pop(opaque, None)

    def invoke_future(self, request: RemotingCommand, timeout: float) -> asyncio.Future[RemotingCommand]:
        """Send a request and return its response future, failed with RemotingTimeoutError after
        ``timeout`` seconds: ``invoke`` without a coroutine, for callers that finish the work in a
        done-callback (a producer's ``send_async``). A cancelled future is forgotten when its response
        arrives or its deadline passes; the connection is not affected."""
        fut = self.start_invoke(request)
        self._watch(request, timeout)
        return fut

    def _watch(self, request: RemotingCommand, timeout: float) -> None:
        """Put the request's deadline into the table the expiry timer scans."""
        deadline = asyncio.get_running_loop().time() + timeout
        self._deadlines[request.opaque] = (deadline, request.code, timeout)
        if self._expiry is None or deadline < self._expiry.when():
            self._arm_expiry(deadline)

    def _arm_expiry(self, deadline: float) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        self._expiry = asyncio.get_running_loop().call_at(deadline, self._expire)

    def _expire(self) -> None:
        """Fail the requests whose deadline has passed, and arm the timer for the next one."""
        self._expiry = None
        now = asyncio.get_running_loop().time() + _EXPIRY_SLACK_S
        earliest = math.inf
        for opaque, (deadline, code, timeout) in list(self._deadlines.items()):
            if deadline > now:
                earliest = min(earliest, deadline)
                continue
            del self._deadlines[opaque]
            fut = self._pending.pop(opaque, None)
            if fut is not None and not fut.done():
                fut.set_exception(
                    RemotingTimeoutError(
                        f"no response to code {code} from {self.address} within {timeout:.1f}s"
                    )
                )
        if earliest < math.inf:
            self._arm_expiry(earliest)

    def invoke_oneway(self, request: RemotingCommand) -> None:
        request.opaque = next(self._opaque)
        request.flag |= FLAG_ONEWAY
        if self._request_hook is not None:
            self._request_hook(request)
        self.send(request)

    async def drain(self) -> None:
        """Wait until the peer has taken what we wrote (producers call this for backpressure)."""
        await self._can_write.wait()

    def close(self) -> None:
        """Close after what is queued has been written."""
        self._output.flush()
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()


async def connect(
    host: str,
    port: int,
    handler: Processor | None = None,
    *,
    timeout: float = 3.0,
    on_close: Callable[[RemotingConnection], None] | None = None,
    request_hook: RequestHook | None = None,
) -> RemotingConnection:
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout):
            _, conn = await loop.create_connection(
                lambda: RemotingConnection(handler, on_close=on_close, request_hook=request_hook),
                host,
                port,
            )
    except (OSError, TimeoutError) as exc:
        raise RemotingConnectError(f"cannot connect to {host}:{port}: {exc or 'timed out'}") from None
    return conn


class RemotingServer:
    """Accepts connections and hands every request to one dispatcher; closes idle connections, refuses
    connections past the caps, and closes a peer that reads nothing of its answers for
    ``slow_peer_timeout_s`` (docs/rocketmq-broker.md#connection-limits)."""

    def __init__(
        self,
        handler: Processor,
        host: str,
        port: int,
        *,
        idle_timeout: float = 120.0,
        on_close: Callable[[RemotingConnection], None] | None = None,
        limits: ConnectionLimits | None = None,
        slow_peer_timeout_s: float = SLOW_PEER_TIMEOUT_S,
    ) -> None:
        self._handler = handler
        self.host = host
        self.port = port
        self.idle_timeout = idle_timeout
        self._on_close = on_close
        #: Only the caps of ``limits`` apply: the idle timeout is ``idle_timeout`` (RocketMQ's 120 s).
        self.gate = ConnectionGate(limits or ConnectionLimits())
        self.slow_peer_timeout_s = slow_peer_timeout_s
        self.connections: set[RemotingConnection] = set()
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None

    def _make_connection(self) -> RemotingConnection:
        return RemotingConnection(
            self._handler,
            on_close=self._closed,
            on_open=self._admit,
            slow_peer_timeout_s=self.slow_peer_timeout_s,
        )

    def _admit(self, conn: RemotingConnection) -> bool:
        refusal = self.gate.admit(conn.peer[0])
        if refusal is not None:
            refusals.warning("refused connection from %s on port %d: %s", conn.address, self.port, refusal)
            return False
        self.connections.add(conn)
        return True

    def _closed(self, conn: RemotingConnection) -> None:
        if conn not in self.connections:
            return  # refused: never counted, never seen by the layer above
        self.connections.discard(conn)
        self.gate.release(conn.peer[0])
        if self._on_close is not None:
            self._on_close(conn)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._make_connection, self.host, self.port, reuse_address=True
        )
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        self._sweeper = asyncio.create_task(self._sweep_idle())

    async def _sweep_idle(self) -> None:
        interval = max(0.05, min(10.0, self.idle_timeout / 4))
        while True:
            await asyncio.sleep(interval)
            deadline = time.monotonic() - self.idle_timeout
            for conn in list(self.connections):
                if conn.last_activity < deadline:
                    log.info("closing idle connection %s", conn.address)
                    conn.close()

    async def close(self) -> None:
        if self._sweeper is not None:
            await cancel_and_wait([self._sweeper])
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            await self._server.wait_closed()
