"""Blocking NSQ facades for code that does not use asyncio.

They share the one background event loop of :class:`tidemq.aio.LoopThread` with the RocketMQ facades; each
call hands a coroutine to it and waits. Consumer handlers are plain functions run in that loop's thread
pool, so a slow handler never stalls the connection (heartbeats keep being answered).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tidemq.aio import LoopThread
from tidemq.nsq.client.config import Config
from tidemq.nsq.client.consumer import Consumer, ConsumerStats
from tidemq.nsq.client.message import Message
from tidemq.nsq.client.producer import Producer


class BlockingProducer:
    """:class:`Producer` for threads: each call blocks until nsqd answers."""

    def __init__(self, addr: str, config: Config | None = None, **options: Any) -> None:
        self._producer: Producer = LoopThread.build(lambda: Producer(addr, config, **options))

    @property
    def addr(self) -> str:
        return self._producer.addr

    def publish(self, topic: str, body: bytes, timeout: float | None = None) -> None:
        LoopThread.run(self._producer.publish(topic, body), timeout)

    def multi_publish(self, topic: str, bodies: Sequence[bytes], timeout: float | None = None) -> None:
        LoopThread.run(self._producer.multi_publish(topic, bodies), timeout)

    def deferred_publish(self, topic: str, delay: float, body: bytes, timeout: float | None = None) -> None:
        LoopThread.run(self._producer.deferred_publish(topic, delay, body), timeout)

    def publish_async(self, topic: str, body: bytes) -> concurrent.futures.Future[None]:
        """Queue a PUB; the returned future settles when nsqd answers."""
        return asyncio.run_coroutine_threadsafe(self._producer.publish(topic, body), LoopThread.loop())

    def ping(self, timeout: float | None = None) -> None:
        LoopThread.run(self._producer.ping(), timeout)

    def stop(self, timeout: float = 5.0) -> None:
        LoopThread.run(self._producer.stop(timeout))

    def __enter__(self) -> BlockingProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class BlockingConsumer:
    """:class:`Consumer` for threads: ``handler(message)`` runs in the background loop's thread pool.

    Returning finishes the message, raising requeues it (with backoff), unless the handler called
    ``message.disable_auto_response()`` and answers itself (``finish``/``requeue``/``touch`` work from any
    thread).
    """

    def __init__(
        self,
        topic: str,
        channel: str,
        handler: Callable[[Message], None],
        *,
        concurrency: int = 1,
        failed_message_hook: Callable[[Message], None] | None = None,
        nsqd_tcp_addresses: Iterable[str] = (),
        lookupd_http_addresses: Iterable[str] = (),
        config: Config | None = None,
        **options: Any,
    ) -> None:
        self._nsqd = list(nsqd_tcp_addresses)
        self._lookupd = list(lookupd_http_addresses)
        self._consumer: Consumer = LoopThread.build(lambda: Consumer(topic, channel, config, **options))
        self._consumer.add_handler(handler, concurrency, failed_message_hook=failed_message_hook)

    def start(self) -> None:
        """Connect to the configured nsqd and lookupd addresses."""
        LoopThread.run(self._consumer.connect_to_nsqds(self._nsqd))
        LoopThread.run(self._consumer.connect_to_lookupds(self._lookupd))

    def connect_to_nsqd(self, addr: str) -> None:
        LoopThread.run(self._consumer.connect_to_nsqd(addr))

    def connect_to_lookupd(self, addr: str) -> None:
        LoopThread.run(self._consumer.connect_to_lookupd(addr))

    def disconnect_from_nsqd(self, addr: str) -> None:
        LoopThread.run(self._consumer.disconnect_from_nsqd(addr))

    def change_max_in_flight(self, max_in_flight: int) -> None:
        async def change() -> None:
            self._consumer.change_max_in_flight(max_in_flight)

        LoopThread.run(change())

    def stats(self) -> ConsumerStats:
        return self._consumer.stats()

    def is_starved(self) -> bool:
        return self._consumer.is_starved()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop gracefully and wait (at most about ``timeout`` seconds) until the consumer has exited."""
        LoopThread.run(self._consumer.stop(timeout))

    def __enter__(self) -> BlockingConsumer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
