"""Blocking facades for code that does not use asyncio.

All facades share one event loop running in a background thread; each call hands a coroutine to it and
waits. Push-consumer listeners are plain functions run on the consume pool, never on the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Sequence
from typing import Any

from tidemq.aio import LoopThread as _LoopThread
from tidemq.client.consumer.lite_pull import LitePullConsumer
from tidemq.client.consumer.push import PushConsumer
from tidemq.client.consumer.types import Listener
from tidemq.client.message import Message, SendResult
from tidemq.client.message_queue import MessageQueue
from tidemq.client.producer import Producer
from tidemq.remoting.message import MessageExt


class BlockingProducer:
    """``Producer`` for threads: ``send`` blocks until the broker answers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._producer: Producer = _LoopThread.build(lambda: Producer(*args, **kwargs))

    def start(self) -> None:
        _LoopThread.run(self._producer.start())

    def shutdown(self) -> None:
        _LoopThread.run(self._producer.shutdown())

    def __enter__(self) -> BlockingProducer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def send(self, msg: Message, **kwargs: Any) -> SendResult:
        return _LoopThread.run(self._producer.send(msg, **kwargs))

    def send_async(self, msg: Message, **kwargs: Any) -> concurrent.futures.Future[SendResult]:
        return asyncio.run_coroutine_threadsafe(self._producer.send(msg, **kwargs), _LoopThread.loop())

    def send_oneway(self, msg: Message) -> None:
        _LoopThread.run(self._producer.send_oneway(msg))

    def send_batch(self, msgs: Sequence[Message], **kwargs: Any) -> SendResult:
        return _LoopThread.run(self._producer.send_batch(msgs, **kwargs))


class BlockingPushConsumer:
    """``PushConsumer`` for threads: the listener is a plain function run on the consume pool."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._consumer: PushConsumer = _LoopThread.build(lambda: PushConsumer(*args, **kwargs))

    def subscribe(self, topic: str, expression: str = "*") -> None:
        self._consumer.subscribe(topic, expression)

    def register_listener(self, listener: Listener, *, orderly: bool = False) -> None:
        _LoopThread.build(lambda: self._consumer.register_listener(listener, orderly=orderly))

    def start(self) -> None:
        _LoopThread.run(self._consumer.start())

    def shutdown(self) -> None:
        _LoopThread.run(self._consumer.shutdown())

    def pause(self) -> None:
        self._consumer.pause()

    def resume(self) -> None:
        self._consumer.resume()

    def __enter__(self) -> BlockingPushConsumer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class BlockingLitePullConsumer:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._consumer: LitePullConsumer = _LoopThread.build(lambda: LitePullConsumer(*args, **kwargs))

    def subscribe(self, topic: str, expression: str = "*") -> None:
        self._consumer.subscribe(topic, expression)

    def assign(self, queues: list[MessageQueue]) -> None:
        _LoopThread.build(lambda: self._consumer.assign(queues))

    def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        return _LoopThread.run(self._consumer.fetch_message_queues(topic))

    def start(self) -> None:
        _LoopThread.run(self._consumer.start())

    def shutdown(self) -> None:
        _LoopThread.run(self._consumer.shutdown())

    def poll(self, timeout: float = 5.0) -> list[MessageExt]:
        return _LoopThread.run(self._consumer.poll(timeout))

    def seek(self, mq: MessageQueue, offset: int) -> None:
        _LoopThread.run(self._consumer.seek(mq, offset))

    def seek_to_begin(self, mq: MessageQueue) -> None:
        _LoopThread.run(self._consumer.seek_to_begin(mq))

    def seek_to_end(self, mq: MessageQueue) -> None:
        _LoopThread.run(self._consumer.seek_to_end(mq))

    def commit(self) -> None:
        _LoopThread.run(self._consumer.commit())

    def __enter__(self) -> BlockingLitePullConsumer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
