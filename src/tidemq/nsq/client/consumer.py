"""An asyncio NSQ consumer that behaves like go-nsq v1.1's ``Consumer`` (docs/protocols/nsq-client.md).

Connections hand each read's messages to an in-process queue without waiting (so heartbeats are always
answered, unlike go-nsq's blocking hand-off); ``concurrency`` workers per handler take them from it. A
worker awaits the handler itself, so a handler that does not suspend costs no task switch, and a worker
only sleeps (one future) when the queue is empty. Responses may come from any thread: they are moved onto
the loop, where the backoff signal (and any RDY change) is written before the FIN/REQ itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import random
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import aiohttp

from tidemq.address import split_host_port
from tidemq.aio import TaskSet, cancel_and_wait, wait_or_timeout
from tidemq.nsq.client import lookup
from tidemq.nsq.client.config import Config, requeue_delay
from tidemq.nsq.client.conn import NsqdConn
from tidemq.nsq.client.errors import AlreadyConnectedError, NotConnectedError, NSQClientError, StoppedError
from tidemq.nsq.client.message import Message
from tidemq.nsq.client.rdy import RdyController, Signal
from tidemq.nsq.protocol import CLOSE_WAIT, encode_command, valid_name
from tidemq.nsq.protocol import Message as Frame

log = logging.getLogger(__name__)

Handler = Callable[[Message], Awaitable[None] | None]
_CLS = encode_command("CLS")


@dataclass(frozen=True, slots=True)
class ConsumerStats:
    messages_received: int
    messages_finished: int
    messages_requeued: int
    connections: int


def _id(message: Message) -> str:
    return message.id.decode(errors="replace")


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004


async def _call(fn: Callable[[Message], Any], is_async: bool, message: Message) -> None:
    """Await async callables on the loop; run plain ones in the loop's thread pool."""
    if is_async:
        await fn(message)
        return
    result = await asyncio.to_thread(fn, message)
    if inspect.isawaitable(result):
        await result


class Consumer:
    """Consume ``topic``/``channel`` from nsqd directly or as discovered through nsqlookupd.

    ``options`` override fields of ``config`` (see :class:`Config`). Add handlers, then connect.
    """

    def __init__(self, topic: str, channel: str, config: Config | None = None, **options: Any) -> None:
        if not valid_name(topic):
            raise ValueError(f"invalid topic name {topic!r}")
        if not valid_name(channel):
            raise ValueError(f"invalid channel name {channel!r}")
        self.topic = topic
        self.channel = channel
        self.config = (config or Config()).copy(**options)
        self._rdy = RdyController(self.config, self._conn_list, lambda: self._stop_flag)
        self._conns: dict[str, NsqdConn] = {}
        self._pending: dict[str, NsqdConn] = {}
        self._nsqd_addrs: list[str] = []
        self._lookupd_urls: list[str] = []
        self._lookupd_index = 0
        self._handlers: list[tuple[Callable[[Message], Any], int, Callable[[Message], Any] | None]] = []
        #: Delivered messages no worker has taken yet, and the futures of workers waiting for one.
        self._ready: deque[Message] = deque()
        self._idle: deque[asyncio.Future[None]] = deque()
        self._workers: list[asyncio.Task[None]] = []
        self._running_workers = 0
        self._tasks = TaskSet()
        self._http: aiohttp.ClientSession | None = None
        self._recheck = asyncio.Event()
        self._stopped = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._connected_flag = False
        self._stop_flag = False
        self._handlers_stopped = False
        self._exiting = False
        self._fallback: asyncio.TimerHandle | None = None
        self._exit_task: asyncio.Future[None] | None = None
        self._rng = random.Random()
        self._received = 0
        self._finished = 0
        self._requeued = 0

    # --- setup ----------------------------------------------------------------------------------------

    def add_handler(
        self,
        handler: Handler,
        concurrency: int = 1,
        *,
        failed_message_hook: Callable[[Message], Any] | None = None,
    ) -> None:
        """Run ``handler`` in ``concurrency`` workers. Raising means failure: the message is requeued.

        ``failed_message_hook`` (go-nsq's ``LogFailedMessage``) sees messages over ``max_attempts`` before
        they are finished unhandled. Both may be async or plain (plain ones run in a thread).
        """
        if self._connected_flag:
            raise RuntimeError("add_handler must be called before connecting")
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self._handlers.append((handler, concurrency, failed_message_hook))

    def _start(self) -> None:
        if self._stop_flag:
            raise StoppedError("consumer stopped")
        if not self._handlers:
            raise NSQClientError("no handlers")
        self._connected_flag = True
        if self._loop is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        for handler, concurrency, hook in self._handlers:
            handler_async = _is_async(handler)
            hook_async = hook is not None and _is_async(hook)
            for _ in range(concurrency):
                self._workers.append(
                    asyncio.create_task(self._worker(handler, handler_async, hook, hook_async))
                )
        self._running_workers = len(self._workers)
        self._tasks.spawn(self._rdy_loop())

    def _conn_list(self) -> list[NsqdConn]:
        return list(self._conns.values())

    # --- public API -----------------------------------------------------------------------------------

    async def connect_to_nsqd(self, addr: str) -> None:
        """Connect to one nsqd; if it later drops, retry every ``lookupd_poll_interval`` (no lookupd)."""
        split_host_port(addr)
        self._start()
        await self._connect(addr)

    async def connect_to_nsqds(self, addrs: Iterable[str]) -> None:
        for addr in addrs:
            await self.connect_to_nsqd(addr)

    async def connect_to_lookupd(self, addr: str) -> None:
        """Add a lookupd; the first one is queried at once and then polled every ``lookupd_poll_interval``."""
        url = lookup.build_lookup_url(addr, self.topic)
        self._start()
        if url in self._lookupd_urls:
            return
        self._lookupd_urls.append(url)
        if len(self._lookupd_urls) == 1:
            await self._query_lookupd()
            self._tasks.spawn(self._lookupd_loop())

    async def connect_to_lookupds(self, addrs: Iterable[str]) -> None:
        for addr in addrs:
            await self.connect_to_lookupd(addr)

    async def disconnect_from_nsqd(self, addr: str) -> None:
        if addr not in self._nsqd_addrs:
            raise NotConnectedError(f"not connected to {addr}")
        self._nsqd_addrs.remove(addr)
        conn = self._conns.get(addr) or self._pending.get(addr)
        if conn is not None:
            conn.close()

    async def disconnect_from_lookupd(self, addr: str) -> None:
        url = lookup.build_lookup_url(addr, self.topic)
        if url not in self._lookupd_urls:
            raise NotConnectedError(f"not using lookupd {addr}")
        if len(self._lookupd_urls) == 1:
            raise NSQClientError(f"cannot disconnect from only remaining nsqlookupd HTTP address {addr}")
        self._lookupd_urls.remove(url)

    def change_max_in_flight(self, max_in_flight: int) -> None:
        """Change the total window; 0 pauses delivery."""
        if max_in_flight < 0:
            raise ValueError(f"max_in_flight must be >= 0, got {max_in_flight}")
        self._rdy.change_max_in_flight(max_in_flight)

    @property
    def max_in_flight(self) -> int:
        return self._rdy.max_in_flight

    def stats(self) -> ConsumerStats:
        return ConsumerStats(self._received, self._finished, self._requeued, len(self._conns))

    def is_starved(self) -> bool:
        """True if some connection's in-flight messages fill 85% of its RDY: more RDY would help."""
        for conn in self._conns.values():
            if conn.in_flight > 0 and conn.in_flight >= int(conn.rdy * 0.85) and not conn.closing:
                return True
        return False

    def connections(self) -> list[NsqdConn]:
        """Live connections (their ``rdy``, ``in_flight``, ``identify`` are informative)."""
        return self._conn_list()

    async def stop(self, timeout: float = 30.0) -> None:
        """Stop gracefully: CLS everywhere, answer what is in flight, then exit (forced after ``timeout``).

        Idempotent. Do not await it from a handler (it waits for the handlers): schedule it as a task.
        """
        if not self._stop_flag:
            self._stop_flag = True
            log.info("[%s/%s] stopping", self.topic, self.channel)
            if self._loop is None:
                self._stopped.set()
            elif not self._conns:
                self._stop_handlers()
            else:
                for conn in self._conn_list():
                    with contextlib.suppress(NotConnectedError):
                        conn.send(_CLS)
                self._fallback = self._loop.call_later(timeout, self._exit)
            for conn in list(self._pending.values()):
                conn.close()
        await self._stopped.wait()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    @property
    def is_stopped(self) -> bool:
        return self._stopped.is_set()

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- connections ----------------------------------------------------------------------------------

    async def _connect(self, addr: str) -> None:
        if addr in self._conns or addr in self._pending:
            raise AlreadyConnectedError(addr)
        conn = NsqdConn(addr, self.config, self, self)
        self._pending[addr] = conn
        if addr not in self._nsqd_addrs:
            self._nsqd_addrs.append(addr)
        log.info("[%s/%s] connecting to nsqd %s", self.topic, self.channel, addr)
        try:
            resp = await conn.connect()
            if self._stop_flag:
                raise StoppedError("consumer stopped")
            if conn.is_closed:
                raise NotConnectedError(f"{addr}: closed right after connecting")
            if resp is not None and resp.max_rdy_count < self._rdy.max_in_flight:
                log.warning(
                    "%s: max RDY count %d < consumer max in flight %d, truncation possible",
                    addr,
                    resp.max_rdy_count,
                    self._rdy.max_in_flight,
                )
            conn.send(encode_command("SUB", self.topic, self.channel))
        except BaseException:
            if self._pending.get(addr) is conn:
                del self._pending[addr]
            conn.close()
            raise
        del self._pending[addr]
        self._conns[addr] = conn
        for other in self._conn_list():
            if other is not conn:
                self._rdy.maybe_update(other)
        self._rdy.maybe_update(conn)

    async def _reconnect(self, addr: str) -> None:
        while True:
            log.info("%s: reconnecting in %.2fs", addr, self.config.lookupd_poll_interval)
            await asyncio.sleep(self.config.lookupd_poll_interval)
            if self._stop_flag:
                return
            if addr not in self._nsqd_addrs:
                log.warning("%s: skipped reconnect after removal", addr)
                return
            try:
                await self._connect(addr)
            except AlreadyConnectedError:
                return
            except Exception as exc:  # keep retrying whatever the reason
                log.error("%s: error connecting to nsqd - %s", addr, exc)
                continue
            return

    # --- ConnDelegate ---------------------------------------------------------------------------------

    def on_message(self, conn: NsqdConn, frame: Frame) -> None:
        """A message frame outside a read's batch: one decoded during bootstrap, behind compression."""
        self.on_messages(conn, [Message(frame.id, frame.body, frame.timestamp, frame.attempts, conn, self)])

    def on_messages(self, conn: NsqdConn, messages: list[Message]) -> None:
        self._received += len(messages)
        self._ready.extend(messages)
        self._wake_workers(len(messages))

    def _wake_workers(self, count: int) -> None:
        """Wake up to ``count`` workers waiting for a message (or, once handlers stop, for the end)."""
        idle = self._idle
        while idle and count > 0:
            waiter = idle.popleft()
            if not waiter.done():
                waiter.set_result(None)
                count -= 1

    def on_response(self, conn: NsqdConn, data: bytes) -> None:
        if data == CLOSE_WAIT:
            log.info("%s: received CLOSE_WAIT", conn.addr)
            conn.closing = True
            if conn.in_flight <= 0:
                conn.close()

    def on_error(self, conn: NsqdConn, data: bytes) -> None:
        log.warning("%s: protocol error - %s", conn.addr, data.decode(errors="replace"))

    def on_close(self, conn: NsqdConn) -> None:
        if self._conns.get(conn.addr) is not conn:
            return
        del self._conns[conn.addr]
        remaining = len(self._conns)
        self._rdy.on_conn_closed(conn, remaining)
        log.log(
            logging.INFO if self._stop_flag else logging.WARNING,
            "%s: connection closed; %d left",
            conn.addr,
            remaining,
        )
        if self._stop_flag:
            if remaining == 0:
                self._stop_handlers()
            return
        if self._lookupd_urls:
            self._recheck.set()
        elif conn.addr in self._nsqd_addrs:
            self._tasks.spawn(self._reconnect(conn.addr))

    # --- MessageDelegate (any thread) -----------------------------------------------------------------

    def on_finish(self, message: Message) -> None:
        self._on_loop(self._finish, message)

    def on_requeue(self, message: Message, delay: float, backoff: bool) -> None:
        if delay == -1:
            delay = requeue_delay(self.config, message.attempts)
        cmd = encode_command("REQ", message.id, str(round(delay * 1000)))
        self._on_loop(self._requeue, message, cmd, Signal.BACKOFF if backoff else Signal.CONTINUE)

    def on_touch(self, message: Message) -> None:
        self._on_loop(self._touch, message)

    def _on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        if self._loop is None or threading.get_ident() == self._loop_thread:
            fn(*args)
        else:
            self._loop.call_soon_threadsafe(fn, *args)

    def _finish(self, message: Message) -> None:
        """Write a FIN (first response only), after any RDY change; RESUME is a no-op unless backing off."""
        conn = self._settled_conn(message)
        if conn is None:
            return
        self._finished += 1
        if self._rdy.backoff_counter:
            self._rdy.signal(Signal.RESUME)
        self._respond(conn, message, conn.send_fin, message.id)

    def _requeue(self, message: Message, cmd: bytes, signal: Signal) -> None:
        conn = self._settled_conn(message)
        if conn is None:
            return
        self._requeued += 1
        self._rdy.signal(signal)
        self._respond(conn, message, conn.send, cmd)

    @staticmethod
    def _settled_conn(message: Message) -> NsqdConn | None:
        """The connection of a message whose first response this is (no longer in flight there)."""
        if not message._settle():
            return None
        message.conn.in_flight -= 1
        return message.conn

    @staticmethod
    def _respond(conn: NsqdConn, message: Message, write: Callable[[bytes], None], data: bytes) -> None:
        if not conn.is_closed:
            write(data)
        else:
            log.debug("%s: connection gone; response for %s dropped", conn.addr, message.id)
        if conn.closing and conn.in_flight <= 0:
            conn.close()

    def _touch(self, message: Message) -> None:
        if not message.has_responded and not message.conn.is_closed:
            message.conn.send(encode_command("TOUCH", message.id))

    # --- workers --------------------------------------------------------------------------------------

    async def _worker(
        self,
        handler: Callable[[Message], Any],
        handler_async: bool,
        hook: Callable[[Message], Any] | None,
        hook_async: bool,
    ) -> None:
        ready = self._ready
        config = self.config
        try:
            while True:
                if not ready:
                    if self._handlers_stopped:
                        return
                    waiter = asyncio.get_running_loop().create_future()
                    self._idle.append(waiter)
                    await waiter
                    continue
                message = ready.popleft()
                try:
                    max_attempts = config.max_attempts
                    if max_attempts > 0 and message.attempts > max_attempts:
                        await self._give_up(message, hook, hook_async)
                        continue
                    try:
                        if handler_async:
                            await handler(message)
                        else:
                            await _call(handler, False, message)
                    except Exception as exc:
                        log.error("handler returned error (%r) for msg %s", exc, _id(message))
                        if not message._auto_response_disabled:
                            message.requeue(-1)
                        continue
                    if message._auto_response_disabled or message._responded:
                        continue
                    message._responded = True  # message.finish(), without its hop: this is the loop
                    self._finish(message)
                except Exception:  # a worker outlives any one message
                    log.exception("handling msg %s failed", _id(message))
        finally:
            self._running_workers -= 1
            if self._running_workers == 0:
                self._exit()

    async def _give_up(
        self, message: Message, hook: Callable[[Message], Any] | None, hook_async: bool
    ) -> None:
        log.warning("msg %s attempted %d times, giving up", _id(message), message.attempts)
        if hook is not None:
            try:
                await _call(hook, hook_async, message)
            except Exception:
                log.exception("failed_message_hook raised for msg %s", _id(message))
        message.finish()

    async def _rdy_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.rdy_redistribute_interval)
            self._rdy.redistribute()

    # --- lookupd --------------------------------------------------------------------------------------

    def _next_lookupd(self) -> str:
        if self._lookupd_index >= len(self._lookupd_urls):
            self._lookupd_index = 0
        url = self._lookupd_urls[self._lookupd_index]
        self._lookupd_index = (self._lookupd_index + 1) % len(self._lookupd_urls)
        return url

    async def _query_lookupd(self) -> None:
        if self._http is None:
            timeout = aiohttp.ClientTimeout(total=self.config.lookupd_poll_timeout)
            self._http = aiohttp.ClientSession(timeout=timeout)
        secret = self.config.auth_secret if self.config.lookupd_authorization else ""
        for _ in range(3):
            url = self._next_lookupd()
            log.info("querying nsqlookupd %s", url)
            try:
                addrs = await lookup.query_lookupd(self._http, url, secret)
                break
            except lookup.LookupdError as exc:
                log.error("error querying nsqlookupd (%s) - %s", url, exc)
        else:
            return
        for addr in addrs:
            if self._stop_flag:
                return
            try:
                await self._connect(addr)
            except AlreadyConnectedError:
                pass
            except Exception as exc:  # one bad nsqd must not stop discovery of the others
                log.error("%s: error connecting to nsqd - %s", addr, exc)

    async def _lookupd_loop(self) -> None:
        interval = self.config.lookupd_poll_interval
        await asyncio.sleep(self._rng.random() * self.config.lookupd_poll_jitter * interval)
        while True:
            await wait_or_timeout(self._recheck, interval)
            self._recheck.clear()
            try:
                await self._query_lookupd()
            except Exception:
                log.exception("querying nsqlookupd failed")

    # --- stopping -------------------------------------------------------------------------------------

    def _stop_handlers(self) -> None:
        if self._handlers_stopped:
            return
        self._handlers_stopped = True
        if self._running_workers == 0:
            self._exit()
            return
        self._wake_workers(len(self._idle))

    def _exit(self) -> None:
        if self._exiting:
            return
        self._exiting = True
        if self._fallback is not None:
            self._fallback.cancel()
        self._rdy.close()
        current = asyncio.current_task()
        tasks = [t for t in (*self._tasks, *self._workers) if t is not current]
        for conn in [*self._conn_list(), *self._pending.values()]:
            conn.close()
        self._exit_task = asyncio.ensure_future(self._finish_exit(tasks))

    async def _finish_exit(self, tasks: list[asyncio.Task[Any]]) -> None:
        await cancel_and_wait(tasks)
        if self._http is not None:
            await self._http.close()
        log.info("[%s/%s] stopped", self.topic, self.channel)
        self._stopped.set()
