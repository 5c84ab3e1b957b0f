"""Blocking facades for code that does not use asyncio.

All facades share one event loop running in a background thread; each call hands a coroutine to it and
waits. Push-consumer listeners are plain functions run on the consume pool, never on the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, Self, TypeVar

from tidemq.aio import LoopThread as _LoopThread
from tidemq.client.consumer.lite_pull import LitePullConsumer
from tidemq.client.consumer.push import PushConsumer
from tidemq.client.consumer.types import Listener, MessageSelector
from tidemq.client.message import Message, SendResult
from tidemq.client.message_queue import MessageQueue
from tidemq.client.producer import Producer
from tidemq.client.transaction import TransactionProducer, TransactionSendResult
from tidemq.record import MessageExt


class _Lifecycle(Protocol):
    async def start(self) -> None: ...

    async def shutdown(self) -> None: ...


C = TypeVar("C", bound=_Lifecycle)


class _Facade(Generic[C]):
    """An asyncio client built on the loop thread, with blocking ``start``/``shutdown`` and ``with``."""

    def __init__(self, factory: Callable[[], C]) -> None:
        self._client: C = _LoopThread.build(factory)

    def start(self) -> None:
        _LoopThread.run(self._client.start())

    def shutdown(self) -> None:
        _LoopThread.run(self._client.shutdown())

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class BlockingProducer(_Facade[Producer]):
    """``Producer`` for threads: ``send`` blocks until the broker answers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(lambda: Producer(*args, **kwargs))

    def send(self, msg: Message, **kwargs: Any) -> SendResult:
        return _LoopThread.run(self._client.send(msg, **kwargs))

    def send_async(self, msg: Message, **kwargs: Any) -> concurrent.futures.Future[SendResult]:
        return asyncio.run_coroutine_threadsafe(self._client.send(msg, **kwargs), _LoopThread.loop())

    def send_oneway(self, msg: Message, **kwargs: Any) -> None:
        _LoopThread.run(self._client.send_oneway(msg, **kwargs))

    def send_batch(self, msgs: Sequence[Message], **kwargs: Any) -> SendResult:
        return _LoopThread.run(self._client.send_batch(msgs, **kwargs))

    def request(self, msg: Message, timeout: float = 3.0) -> MessageExt:
        """Send a request and block until its reply (``Producer.request``)."""
        return _LoopThread.run(self._client.request(msg, timeout))

    def request_async(self, msg: Message, timeout: float = 3.0) -> concurrent.futures.Future[MessageExt]:
        return asyncio.run_coroutine_threadsafe(self._client.request(msg, timeout), _LoopThread.loop())

    def reply(self, request: MessageExt, body: bytes) -> SendResult:
        return _LoopThread.run(self._client.reply(request, body))


class BlockingTransactionProducer(_Facade[TransactionProducer]):
    """``TransactionProducer`` for threads: the executor and checker may be plain functions; they run on the
    client's loop, so they should be quick (a slow one holds up the client's other work)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(lambda: TransactionProducer(*args, **kwargs))

    def send(self, msg: Message, **kwargs: Any) -> SendResult:
        return _LoopThread.run(self._client.send(msg, **kwargs))

    def send_in_transaction(self, msg: Message, arg: Any = None) -> TransactionSendResult:
        return _LoopThread.run(self._client.send_in_transaction(msg, arg))


class BlockingPushConsumer(_Facade[PushConsumer]):
    """``PushConsumer`` for threads: the listener is a plain function run on the consume pool."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(lambda: PushConsumer(*args, **kwargs))

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        self._client.subscribe(topic, expression)

    def register_listener(self, listener: Listener, *, orderly: bool = False) -> None:
        _LoopThread.build(lambda: self._client.register_listener(listener, orderly=orderly))

    def pause(self) -> None:
        self._client.pause()

    def resume(self) -> None:
        self._client.resume()


class BlockingLitePullConsumer(_Facade[LitePullConsumer]):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(lambda: LitePullConsumer(*args, **kwargs))

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        self._client.subscribe(topic, expression)

    def assign(self, queues: list[MessageQueue]) -> None:
        _LoopThread.build(lambda: self._client.assign(queues))

    def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        return _LoopThread.run(self._client.fetch_message_queues(topic))

    def poll(self, timeout: float = 5.0) -> list[MessageExt]:
        return _LoopThread.run(self._client.poll(timeout))

    def seek(self, mq: MessageQueue, offset: int) -> None:
        _LoopThread.run(self._client.seek(mq, offset))

    def seek_to_begin(self, mq: MessageQueue) -> None:
        _LoopThread.run(self._client.seek_to_begin(mq))

    def seek_to_end(self, mq: MessageQueue) -> None:
        _LoopThread.run(self._client.seek_to_end(mq))

    def commit(self) -> None:
        _LoopThread.run(self._client.commit())
