"""Small asyncio helpers shared by servers and clients."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import threading
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel background tasks and wait until each has really stopped."""
    pending = [task for task in tasks if task is not None]
    for task in pending:
        task.cancel()
    for task in pending:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


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
