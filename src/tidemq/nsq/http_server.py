"""The aiohttp server under nsqd's and nsqlookupd's HTTP APIs, hardened against abusive clients
(docs/nsq-server.md#connection-limits).

aiohttp's defaults suit a web application behind a proxy, not a port on the open network: it keeps an idle
connection an hour, logs a full traceback for every malformed request and decodes ``Content-Encoding``
bodies that nsqd stores as sent. Here a malformed request is answered as Go's ``net/http`` answers it, with
at most one (rate-limited) log line; a connection is closed when idle, or refused past the caps.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

from aiohttp import web
from aiohttp.http_exceptions import LineTooLong
from aiohttp.web_protocol import RequestHandler

from tidemq.connection_gate import ConnectionGate, ConnectionLimits, RateLimitedLog

log = logging.getLogger(__name__)

#: Lines a second the bad-request log writes before it only counts them (one log for the process).
BAD_REQUEST_LINES_PER_SECOND = 5
bad_requests = RateLimitedLog(log, BAD_REQUEST_LINES_PER_SECOND)

#: Go's ``net/http`` reads a request line and headers of up to 1 MiB; aiohttp stops at 8 KiB, which refuses
#: the long query strings nsqd accepts. 64 KiB per line or header keeps a connection's buffer small.
MAX_LINE = 65_536

#: How long a connection whose body was left unread lingers after the answer (Go's rstAvoidanceDelay).
UNREAD_BODY_GRACE_S = 0.5

_REFUSAL_BODY = b'{"message":"TOO_MANY_CONNECTIONS"}'
#: What a connection past the caps reads before it is closed: nsqd's V1 error shape, status 503.
REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Type: application/json; charset=utf-8\r\n"
    b"X-NSQ-Content-Type: nsq; version=1.0\r\n"
    b"Connection: close\r\n"
    b"Content-Length: " + str(len(_REFUSAL_BODY)).encode() + b"\r\n\r\n" + _REFUSAL_BODY
)


class HttpGuard:
    """One port's limits, its connection count and its name in log lines."""

    def __init__(self, name: str, limits: ConnectionLimits) -> None:
        self.name = name
        self.limits = limits
        self.gate = ConnectionGate(limits)

    def handler_args(self) -> dict[str, Any]:
        idle = self.limits.idle_timeout_s
        return {
            "access_log": None,
            # aiohttp's own keep-alive timer agrees with ours; 0 (off) keeps its long default
            "keepalive_timeout": idle if idle > 0 else 3630.0,
            # an unread body is not drained after the answer (a 413 must not read the rest): the connection
            # closes instead, as Go's net/http closes one with more than 256 KiB left unread
            "lingering_time": 0.0,
            # nsqd never decodes Content-Encoding: the body is the message, as sent
            "auto_decompress": False,
            "max_line_size": MAX_LINE,
            "max_field_size": MAX_LINE,
        }


class GuardedHandler(RequestHandler):
    """aiohttp's connection handler with the port's caps, an idle timer and quiet bad-request handling."""

    def __init__(self, manager: web.Server, guard: HttpGuard, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.guard = guard
        self.ip = ""
        self.admitted = False
        self.last_read = 0.0
        self.idle_handle: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self.ip = str(peer[0]) if peer else ""
        reason = self.guard.gate.admit(self.ip)
        if reason is not None:
            bad_requests.warning("%s: refused a connection from %s: %s", self.guard.name, self.ip, reason)
            cast(asyncio.Transport, transport).write(REFUSAL)
            transport.close()
            return
        self.admitted = True
        super().connection_made(transport)
        self.last_read = self._loop.time()
        self._schedule_idle_check(self.last_read)

    def data_received(self, data: bytes) -> None:
        if not self.admitted:
            return
        self.last_read = self._loop.time()
        super().data_received(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self.admitted:
            return
        self.admitted = False
        self.guard.gate.release(self.ip)
        if self.idle_handle is not None:
            self.idle_handle.cancel()
            self.idle_handle = None
        super().connection_lost(exc)

    def close(self) -> None:
        """After an answer given before its request's body was read (a 413), close as Go's ``net/http``
        does: send FIN, drop what still arrives for a moment so the client can read the answer instead of
        a reset, then close. Nothing of the rest is kept."""
        super().close()
        transport = self.transport
        answered_early = not self._request_in_progress and self._waiter is None and not self._force_close
        if transport is None or transport.is_closing() or not answered_early:
            return
        self.transport = None  # aiohttp's own close now skips it: ours comes after the grace period
        if transport.can_write_eof():
            transport.write_eof()
        transport.resume_reading()  # data_received drops it: the handler is closed
        self._loop.call_later(UNREAD_BODY_GRACE_S, transport.close)

    def _schedule_idle_check(self, since: float) -> None:
        timeout = self.guard.limits.idle_timeout_s
        if timeout > 0:
            self.idle_handle = self._loop.call_at(since + timeout, self._check_idle)

    def _check_idle(self) -> None:
        """Close a connection that sent nothing for the idle timeout, unless it waits for our answer."""
        self.idle_handle = None
        if not self.admitted:
            return
        now = self._loop.time()
        request = self._current_request
        if request is not None and request.content.is_eof():  # the whole request is in: we owe the answer
            self._schedule_idle_check(now)
        elif now - self.last_read < self.guard.limits.idle_timeout_s:
            self._schedule_idle_check(self.last_read)
        else:
            log.debug("%s: closing %s, idle %.0fs", self.guard.name, self.ip, now - self.last_read)
            self.force_close()

    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """A request that could not be parsed: Go's plain-text answer, one log line and no traceback."""
        if isinstance(exc, LineTooLong):
            status = 431
        reason = str(getattr(exc, "message", None) or exc or message or "").splitlines()[0][:200]
        bad_requests.warning(
            "%s: bad request from %s: %d %s", self.guard.name, request.remote, status, reason
        )
        title = {400: "400 Bad Request", 431: "431 Request Header Fields Too Large"}.get(status)
        if title is None:
            title = "500 Internal Server Error"
            status = 500
        resp = web.Response(status=status, text=title, content_type="text/plain")
        resp.force_close()
        return resp

    def log_exception(self, *args: Any, **kw: Any) -> None:
        """aiohttp's own failures (e.g. a client gone mid-answer): one line, the traceback only at debug."""
        exc = kw.get("exc_info")
        detail = f"{type(exc).__name__}: {exc}" if isinstance(exc, BaseException) else ""
        bad_requests.warning(
            "%s: %s from %s: %s", self.guard.name, args[0] if args else "error", self.ip, detail
        )
        log.debug("%s: details", self.guard.name, exc_info=exc if isinstance(exc, BaseException) else None)


class GuardedSite(web.TCPSite):
    """A TCP site whose connections are ``GuardedHandler``s."""

    def __init__(self, runner: web.AppRunner, host: str | None, port: int, guard: HttpGuard) -> None:
        super().__init__(runner, host, port, reuse_address=True)
        self.guard = guard

    async def start(self) -> None:
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        args = self.guard.handler_args()
        del args["access_log"]  # the runner's, not the handler's

        def factory() -> GuardedHandler:
            return GuardedHandler(server, self.guard, loop=loop, access_log=None, **args)

        self._server = await loop.create_server(factory, self._host, self._port, reuse_address=True)
        self.bound_port: int = self._server.sockets[0].getsockname()[1]


async def serve(
    app: web.Application, host: str | None, port: int, guard: HttpGuard
) -> tuple[web.AppRunner, int]:
    """Start ``app`` on ``host:port`` behind ``guard``; the runner (to clean up) and the bound port."""
    runner = web.AppRunner(app, handle_signals=False, **guard.handler_args())
    await runner.setup()
    site = GuardedSite(runner, host, port, guard)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, site.bound_port
