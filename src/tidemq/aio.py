"""Small asyncio helpers shared by servers and clients."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")
Bytes = bytes | bytearray | memoryview

log = logging.getLogger(__name__)


async def cancel_and_wait(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel background tasks and wait until each has really stopped."""
    pending = [task for task in tasks if task is not None]
    for task in pending:
        task.cancel()
    for task in pending:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


class TaskSet:
    """Background tasks a component starts and must be able to stop. asyncio keeps only weak references to
    tasks, so each is held here until it ends, then dropped."""

    __slots__ = ("_tasks",)

    def __init__(self) -> None:
        self._tasks: set[asyncio.Future[Any]] = set()

    def spawn(self, work: Awaitable[Any]) -> asyncio.Future[Any]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def __iter__(self) -> Iterator[asyncio.Future[Any]]:
        return iter(list(self._tasks))

    def __len__(self) -> int:
        return len(self._tasks)


async def wait_or_timeout(event: asyncio.Event, timeout_s: float | None) -> None:
    """Wait until ``event`` is set or ``timeout_s`` seconds have passed, whichever comes first (None: no
    time limit): the wake-up of a background loop that works when asked and on a timer."""
    if timeout_s is None:
        await event.wait()
        return
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await event.wait()


async def finish_in_thread(func: Callable[..., None], *args: Any) -> None:
    """Run ``func`` on a worker thread, to its end even when the caller is cancelled meanwhile: the caller
    holds the files (a lock, descriptors) the thread uses and must not let go of them, nor start the next
    round on them, before the thread is done. The cancellation is raised once it is."""
    job = asyncio.get_running_loop().run_in_executor(None, func, *args)
    try:
        await asyncio.shield(job)
    except asyncio.CancelledError:
        await asyncio.wait([job])
        if job.exception() is not None:
            log.error("work interrupted by a cancellation failed: %s", job.exception())
        raise


#: Bytes one read may take: asyncio's own limit for a plain protocol's ``recv``.
RECEIVE_BUFFER_BYTES = 256 * 1024


class _ReceiveBuffer(threading.local):
    def __init__(self) -> None:
        self.view = memoryview(bytearray(RECEIVE_BUFFER_BYTES))


_receive_buffer = _ReceiveBuffer()


class BufferedReceiver(asyncio.BufferedProtocol):
    """A protocol that reads into one buffer per thread instead of a new ``bytes`` per read.

    For a plain ``Protocol`` asyncio calls ``recv(256 KiB)``. glibc serves an allocation that large with
    ``mmap``, shrinks it to the bytes read with ``mremap`` and later frees it with ``munmap``: three more
    syscalls and a page fault on every read, which cost more than the read itself for small reads
    (docs/performance.md). Every protocol on a thread shares the buffer, since each read is handed over
    before the next one starts. ``data_received`` gets a view of the bytes read that is valid only during
    the call: whatever a subclass keeps, it copies.
    """

    def get_buffer(self, sizehint: int) -> memoryview:
        return _receive_buffer.view

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(_receive_buffer.view[:nbytes])

    def data_received(self, data: memoryview) -> None:
        raise NotImplementedError


class OutputBuffer:
    """Frames written during one pass of the event loop, handed to ``sink`` as one write.

    Each socket write is a syscall (on loopback it also runs the receiver's TCP work) and, on a compressed
    stream, one compressed block, so frames queued together leave together; nothing waits for a timer.
    """

    __slots__ = ("_loop", "_parts", "_scheduled", "_sink", "held")

    def __init__(self, sink: Callable[[Bytes], None], *, held: bool = False) -> None:
        self._sink = sink
        self._loop = asyncio.get_running_loop()
        self._parts: list[Bytes] = []
        self._scheduled = False
        #: While set, flushes keep what is queued (the connection is not ready: handshake, TLS upgrade).
        self.held = held

    def write(self, data: Bytes) -> None:
        self._parts.append(data)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def write_parts(self, parts: Iterable[Bytes]) -> None:
        self._parts += parts
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def cork(self) -> bool:
        """Queue without scheduling a flush until ``uncork``: a reader that answers what it just read calls
        ``uncork`` at the end of that read, so the answer leaves in the same loop pass instead of the next
        one (one epoll round less per request-response). False if a flush was already scheduled (then that
        one writes, and ``uncork`` must not be called)."""
        if self._scheduled:
            return False
        self._scheduled = True
        return True

    def uncork(self) -> None:
        """Write what was queued since ``cork`` returned True (one write for the whole read)."""
        self.flush()

    def flush(self) -> None:
        """Hand what is queued to the sink now (before a close, or once ``held`` is cleared)."""
        self._scheduled = False
        if self._parts and not self.held:
            parts, self._parts = self._parts, []
            self._sink(parts[0] if len(parts) == 1 else b"".join(parts))

    def clear(self) -> None:
        self._parts.clear()


class LoopThread:
    """One process-wide event loop in a daemon thread, for the blocking client facades.

    Each blocking call hands a coroutine to it and waits; asyncio-side objects are built on its thread.
    """

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def loop(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None or cls._loop.is_closed():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="tidemq-client-loop", daemon=True)
                thread.start()
                cls._loop = loop
                atexit.register(loop.call_soon_threadsafe, loop.stop)
            return cls._loop

    @classmethod
    def run(cls, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, cls.loop()).result(timeout)

    @classmethod
    def build(cls, factory: Callable[[], T]) -> T:
        """Construct an asyncio-side object on the loop thread (its locks and queues belong there)."""

        async def make() -> T:
            return factory()

        return cls.run(make())
