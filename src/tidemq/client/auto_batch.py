"""Producer auto-batching (RocketMQ 5.x ProduceAccumulator): single sends gathered per message queue into
batch sends, each message's future resolving with its own SendResult (docs/clients.md#auto-batching).

Java holds a batch until it is 32 KiB or 10 ms old, which costs every message of a slow stream up to
10 ms. Here a queue with no batch in flight sends at the next turn of the event loop (whatever arrived in
the meantime goes along); only while one is in flight do messages wait, for its answer, for the byte or
count limit, or for ``max_delay_ms`` at most. A quiet stream pays no hold; a busy one gets big batches."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tidemq.client import api
from tidemq.client.config import strip_namespace
from tidemq.client.fault import retryable
from tidemq.client.instance import MQClientError
from tidemq.client.message import Message, SendResult
from tidemq.client.message_queue import MessageQueue
from tidemq.record import NAME_VALUE_SEPARATOR, Prop, add_item, encode_properties
from tidemq.remoting.names import RETRY_PREFIX
from tidemq.remoting.transport import RemotingError

if TYPE_CHECKING:
    from tidemq.client.producer import Producer, QueueSelector

log = logging.getLogger(__name__)
#: ``send_async``'s callback: told (result, None) or (None, error).
SendCallback = Callable[[SendResult | None, BaseException | None], None]
_UNIQ_ONLY = Prop.UNIQ_KEY + NAME_VALUE_SEPARATOR
#: Properties that make a message something other than a plain one: timer, transaction half, request or
#: reply. Java's canBatch sends these alone too (the broker would store a batched one wrongly).
_ALONE_PROPS = (
    Prop.DELAY,
    Prop.TIMER_DELIVER_MS,
    Prop.TIMER_DELAY_SEC,
    Prop.TIMER_DELAY_MS,
    Prop.TRAN_MSG,
    Prop.PGROUP,
    Prop.CORRELATION_ID,
    Prop.REPLY_TO_CLIENT,
    Prop.MSG_TYPE,
)


@dataclass(frozen=True, slots=True)
class AutoBatchSettings:
    """Java DefaultMQProducer's batchMaxDelayMs (10), batchMaxBytes (32 KiB), totalBatchMaxBytes (32 MiB);
    ``max_count`` caps the messages of one batch (Java has no such cap)."""

    max_delay_ms: float = 10.0
    max_bytes: int = 32 * 1024
    max_count: int = 1024
    total_max_bytes: int = 32 * 1024 * 1024

    def __post_init__(self) -> None:
        if not 0 < self.max_delay_ms <= 30_000:
            raise ValueError(f"batch_max_delay_ms must be in (0, 30000], got {self.max_delay_ms}")
        if not 0 < self.max_bytes <= 2 * 1024 * 1024:
            raise ValueError(f"batch_max_bytes must be in (0, 2 MiB], got {self.max_bytes}")
        if self.max_count < 1:
            raise ValueError(f"batch_max_count must be at least 1, got {self.max_count}")
        if self.total_max_bytes < self.max_bytes:
            raise ValueError("total_batch_max_bytes must be at least batch_max_bytes")


#: (queue, wait for store, may retry elsewhere): messages that may share one batch request.
_Key = tuple[MessageQueue, bool, bool]


class _Gathering:
    """The messages waiting for one key's next batch, and how many of its batches are on the wire."""

    __slots__ = (
        "callbacks", "futures", "ids", "in_flight", "msgs", "parts", "scheduled", "size", "started", "timer"
    )  # fmt: skip

    def __init__(self) -> None:
        self.msgs: list[Message] = []
        #: The batch body's pieces so far (record/batch.py add_item): the body is their join.
        self.parts: list[bytes] = []
        self.ids: list[str] = []
        self.futures: list[asyncio.Future[SendResult]] = []
        self.callbacks: list[SendCallback | None] = []
        self.size = 0
        self.started = 0.0
        self.in_flight = 0
        self.scheduled = False
        self.timer: asyncio.TimerHandle | None = None


@dataclass(slots=True)
class _Batch:
    msgs: list[Message]
    parts: list[bytes]
    ids: list[str]
    futures: list[asyncio.Future[SendResult]]
    callbacks: list[SendCallback | None]

    def settle(self, i: int, result: SendResult | None, error: BaseException | None) -> None:
        """Message ``i``'s future gets its result or the error (unless the caller cancelled it), and its
        callback, if any, is told once: a batch that fails after some of its messages were settled (an
        interceptor raised) does not tell those again. A callback that raises is logged; the others are
        still told. A callback that takes the error has read it: asyncio does not report it as never
        retrieved when the caller dropped the future."""
        future, callback = self.futures[i], self.callbacks[i]
        if future.cancelled():
            result, error = None, asyncio.CancelledError()
        elif future.done():
            return  # settled before: the batch failed after this message was settled
        elif error is not None:
            future.set_exception(error)
            if callback is not None:
                future.exception()  # read: the callback takes it
        elif result is not None:
            future.set_result(result)
        if callback is None:
            return
        self.callbacks[i] = None
        try:
            callback(result, error)
        except Exception:
            log.exception("a send_async callback raised")


class Accumulator:
    """One producer's gatherings, keyed per queue; ``held`` bytes are bounded by ``total_max_bytes``."""

    def __init__(self, producer: Producer, settings: AutoBatchSettings) -> None:
        self.producer = producer
        self.settings = settings
        self.held = 0
        self._gatherings: dict[_Key, _Gathering] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._room: list[asyncio.Future[None]] = []

    # --- entry --------------------------------------------------------------------------------------

    def batchable(self, msg: Message, kwargs: dict[str, Any]) -> bool:
        """Whether ``msg`` may join a batch; the rest go alone as single sends (Java's canBatch)."""
        body = msg.body
        if (
            msg.delay_level
            or msg.deliver_at is not None
            or msg.delay is not None
            or (kwargs and (kwargs.get("deliver_at") is not None or kwargs.get("delay") is not None))
            or not isinstance(body, bytes)
            or not body
            or len(body) > self.settings.max_bytes
            or len(body) >= self.producer.compress_over  # batches are not compressed: keep it compressed
            or msg.topic.startswith(RETRY_PREFIX)
        ):
            return False
        props = msg.properties
        return not (props and any(k in props for k in _ALONE_PROPS))

    def has_room(self) -> bool:
        return self.held < self.settings.total_max_bytes

    async def wait_for_room(self) -> None:
        """Back-pressure: wait while the held bytes are at the total limit instead of holding more."""
        while self.held >= self.settings.total_max_bytes:
            waiter = asyncio.get_running_loop().create_future()
            self._room.append(waiter)
            await waiter

    def submit(
        self,
        msg: Message,
        queues: list[MessageQueue],
        *,
        queue: MessageQueue | None = None,
        selector: QueueSelector | None = None,
        arg: Any = None,
        sharding_key: str | None = None,
        timeout: float | None = None,
        callback: SendCallback | None = None,
    ) -> asyncio.Future[SendResult]:
        """Add a batchable message to its queue's gathering; the future (and ``callback``) get its own
        SendResult. The queue is chosen as a single send would (explicit, selector, sharding key, else
        round robin). The callback is called when the batch's answer is split, not as a done-callback of
        the future: that was a closure, a callback entry and a loop handle more per message, which the
        garbage collector walked too; calling it directly cut the producer's CPU a message by about a
        fifth at 2,048 in flight (docs/performance.md)."""
        producer = self.producer
        if sharding_key is not None:
            from tidemq.client.producer import select_by_hash

            selector, arg = select_by_hash, sharding_key
        if selector is not None:
            queue = selector(queues, msg, arg)
        may_retry = queue is None
        mq = queue if queue is not None else producer._pick(queues, None)
        uniq = producer._ids.next_id()
        if msg.properties or msg.tags or msg.keys:
            props = msg.wire_properties()
            wait = props.pop(Prop.WAIT, "true") != "false"
            uniq = props.setdefault(Prop.UNIQ_KEY, uniq)
            text = encode_properties(props)
        else:  # the common case, without a dict per message
            wait, text = True, _UNIQ_ONLY + uniq
        key = (mq, wait, may_retry)
        gathering = self._gatherings.get(key)
        if gathering is None:
            gathering = self._gatherings[key] = _Gathering()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[SendResult] = loop.create_future()
        if not gathering.parts:
            gathering.started = time.monotonic() + (timeout or producer.send_timeout)
        gathering.msgs.append(msg)
        size = add_item(gathering.parts, msg.flag, msg.body, text)
        gathering.ids.append(uniq)
        gathering.futures.append(future)
        gathering.callbacks.append(callback)
        gathering.size += size
        self.held += size
        for hook in producer.interceptors:
            hook(msg, mq, None, None)
        if gathering.size >= self.settings.max_bytes or len(gathering.msgs) >= self.settings.max_count:
            self._flush(key, gathering)
        elif gathering.in_flight == 0:
            if not gathering.scheduled:
                gathering.scheduled = True
                loop.call_soon(self._flush_idle, key, gathering)
        elif gathering.timer is None:
            gathering.timer = loop.call_later(self.settings.max_delay_ms / 1000, self._flush, key, gathering)
        return future

    # --- sending ------------------------------------------------------------------------------------

    def _flush_idle(self, key: _Key, gathering: _Gathering) -> None:
        gathering.scheduled = False
        if gathering.parts and gathering.in_flight == 0:
            self._flush(key, gathering)

    def _flush(self, key: _Key, gathering: _Gathering) -> None:
        if gathering.timer is not None:
            gathering.timer.cancel()
            gathering.timer = None
        if not gathering.parts:
            return
        batch = _Batch(gathering.msgs, gathering.parts, gathering.ids, gathering.futures, gathering.callbacks)
        size, deadline = gathering.size, gathering.started
        gathering.msgs, gathering.parts, gathering.ids, gathering.futures = [], [], [], []
        gathering.callbacks, gathering.size = [], 0
        gathering.in_flight += 1
        task = asyncio.ensure_future(self._send(key, batch, deadline))
        self._tasks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self._tasks.discard(t)
            gathering.in_flight -= 1
            self._release(size)
            if gathering.parts and gathering.in_flight == 0:
                self._flush(key, gathering)  # what gathered while this batch was out goes now
            elif not gathering.parts and gathering.in_flight == 0 and gathering.timer is None:
                self._gatherings.pop(key, None)

        task.add_done_callback(done)

    def _release(self, size: int) -> None:
        self.held -= size
        if self._room and self.held < self.settings.total_max_bytes:
            waiters, self._room = self._room, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def _send(
        self,
        key: _Key,
        batch: _Batch,
        deadline: float,
    ) -> None:
        """One batch request, retried on another queue as a single send would be (unless its queue was
        chosen by the caller); every message of it succeeds or fails together."""
        producer = self.producer
        mq, wait, may_retry = key
        body = b"".join(batch.parts)
        props = {Prop.WAIT: "true" if wait else "false"}
        last_error: BaseException | None = None
        last_broker: str | None = None
        attempts = 0
        try:
            for _attempt in range(1 + (producer.retry_times if may_retry else 0)):
                if time.monotonic() >= deadline:
                    break
                if attempts:
                    mq = producer._pick(await producer.queues_for(mq.topic), last_broker)
                attempts += 1
                header = producer._header(mq.topic, mq.queue_id, 0, props, batch=True)
                started = time.monotonic()
                try:
                    result = await producer._invoke(mq, api.send_request(header, body), deadline, "")
                except (RemotingError, MQClientError, api.BrokerError) as exc:
                    last_error, last_broker = exc, mq.broker_name
                    producer._record_latency(mq.broker_name, (time.monotonic() - started) * 1000, True)
                    if not retryable(exc):
                        break
                    log.warning("batch send to %s failed (%s), retrying on another queue", mq, exc)
                    continue
                producer._record_latency(mq.broker_name, (time.monotonic() - started) * 1000, False)
                self._resolve(result, batch)
                return
            error: BaseException
            if last_error is not None and not retryable(last_error):
                error = last_error
            else:
                error = producer._send_failed(
                    f"batch send to {strip_namespace(producer.config.namespace, mq.topic)!r}",
                    attempts,
                    deadline,
                    None,
                    last_error,
                )
        except Exception as exc:  # a bug or a closed client: the futures must not hang
            error = exc
        self._fail(batch, error)

    def _resolve(self, result: SendResult, batch: _Batch) -> None:
        """Split the batch's answer: message i has the i-th offset message id and the first offset + i."""
        offset_ids = result.offset_msg_id.split(",")
        hooks = self.producer.interceptors
        for i in range(len(batch.futures)):
            own = SendResult(
                result.status,
                batch.ids[i],
                offset_ids[i] if i < len(offset_ids) else "",
                result.message_queue,
                result.queue_offset + i,
            )
            for hook in hooks:
                hook(batch.msgs[i], result.message_queue, own, None)
            batch.settle(i, own, None)

    def _fail(self, batch: _Batch, error: BaseException) -> None:
        for i in range(len(batch.futures)):
            for hook in self.producer.interceptors:
                hook(batch.msgs[i], None, None, error)
            batch.settle(i, None, error)

    async def close(self) -> None:
        """Send what is gathered and wait for every batch on the wire: shutdown drops nothing."""
        for key, gathering in list(self._gatherings.items()):
            if gathering.parts and gathering.in_flight == 0:
                self._flush(key, gathering)
        while self._tasks or any(g.parts for g in self._gatherings.values()):
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            for key, gathering in list(self._gatherings.items()):
                if gathering.parts and gathering.in_flight == 0:
                    self._flush(key, gathering)
            if not self._tasks:
                await asyncio.sleep(0)
