"""The producer: sync, async, oneway, batch and ordered sends with retries, and optional send-latency fault
avoidance (docs/protocols/rocketmq-messages.md#producer)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from tidemq.address import DEFAULT_NAMESRV_ADDR
from tidemq.client import api
from tidemq.client.auto_batch import Accumulator, AutoBatchSettings, SendCallback
from tidemq.client.config import ClientConfig, strip_namespace, wrap_namespace
from tidemq.client.fast_send import start_send
from tidemq.client.fault import LATENCY_MAX_MS, NOT_AVAILABLE_DURATION_MS, LatencyFaultTolerance, retryable
from tidemq.client.instance import ClientInstance, MQClientError
from tidemq.client.message import Message, SendResult, SendStatus, deliver_time_ms
from tidemq.client.message_queue import MessageQueue
from tidemq.client.request import create_reply, is_reply
from tidemq.client.request import request as send_request_for_reply
from tidemq.record import (
    NAME_VALUE_SEPARATOR,
    MessageExt,
    Prop,
    SysFlag,
    UniqueIdGenerator,
    add_item,
    compress_body,
    encode_properties,
    tag_hash,
)
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.headers import SendMessageRequestHeader
from tidemq.remoting.names import (
    AUTO_CREATE_TOPIC_KEY,
    MAX_TOPIC_LENGTH,
    NAME_CHARACTERS,
    RETRY_PREFIX,
    well_formed_name,
)
from tidemq.remoting.transport import RemotingError

log = logging.getLogger(__name__)
_T = TypeVar("_T")
_F = TypeVar("_F", bound=asyncio.Future[Any])
_UNIQ_ONLY = Prop.UNIQ_KEY + NAME_VALUE_SEPARATOR

_STATUS: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}

QueueSelector = Callable[[list[MessageQueue], Message, Any], MessageQueue]
SendHook = Callable[[Message, MessageQueue | None, SendResult | None, BaseException | None], None]


def select_by_hash(queues: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    """Java's SelectMessageQueueByHash: same key, same queue (strings hash like Java's String.hashCode)."""
    value = tag_hash(arg) if isinstance(arg, str) else hash(arg)
    return queues[abs(value) % len(queues)]


def _callback_of(
    callback: Callable[[_T | None, BaseException | None], None], pending: set[asyncio.Future[Any]]
) -> Callable[[asyncio.Future[_T]], None]:
    """A done-callback that hands ``callback`` the result or the error, first dropping the future from
    ``pending``: one callback where two would each be a loop handle per send."""

    def done(f: asyncio.Future[_T]) -> None:
        pending.discard(f)
        exc = f.exception() if not f.cancelled() else asyncio.CancelledError()
        callback(None if exc else f.result(), exc)

    return done


def validate_topic(topic: str) -> None:
    if not well_formed_name(topic):
        raise MQClientError(f"invalid topic {topic!r}: 1-{MAX_TOPIC_LENGTH} characters of {NAME_CHARACTERS}")


class Producer:
    def __init__(
        self,
        group: str = "DEFAULT_PRODUCER",
        namesrv_addr: str = DEFAULT_NAMESRV_ADDR,
        *,
        config: ClientConfig | None = None,
        send_timeout: float = 3.0,
        retry_times: int = 2,
        compress_over: int = 4096,
        compress_level: int = 5,
        max_message_size: int = 4 * 1024 * 1024,
        default_topic_queue_nums: int = 4,
        send_latency_fault_enable: bool = False,
        latency_max_ms: Sequence[float] = LATENCY_MAX_MS,
        not_available_duration_ms: Sequence[float] = NOT_AVAILABLE_DURATION_MS,
        auto_batch: bool = False,
        batch_max_delay_ms: float = 10.0,
        batch_max_bytes: int = 32 * 1024,
        batch_max_count: int = 1024,
        total_batch_max_bytes: int = 32 * 1024 * 1024,
    ) -> None:
        """``auto_batch`` (Java 5.x autoBatch, off by default): single sends are gathered per queue into
        batch sends (client/auto_batch.py; the ``batch_*`` limits are Java's batchMaxDelayMs,
        batchMaxBytes and totalBatchMaxBytes, plus a message count cap).

        ``send_latency_fault_enable`` (Java's sendLatencyFaultEnable, off by default): skip a broker
        for a while after a slow or failed send, for as long as ``not_available_duration_ms`` says for the
        first of ``latency_max_ms`` the latency reached (a failure counts as 30 s: 10 minutes with Java's
        tables). Off, a send that failed is retried on another broker and nothing is remembered."""
        self.config = (config or ClientConfig(namesrv_addr=namesrv_addr)).with_unique_instance()
        self.group = wrap_namespace(self.config.namespace, group)
        self.send_timeout = send_timeout
        self.retry_times = retry_times
        self.compress_over = compress_over
        self.compress_level = compress_level
        self.max_message_size = max_message_size
        self.default_topic_queue_nums = default_topic_queue_nums
        self.send_latency_fault_enable = send_latency_fault_enable
        self.interceptors: list[SendHook] = []
        self._faults = LatencyFaultTolerance(latency_max_ms, not_available_duration_ms)
        self._queues: dict[str, list[MessageQueue]] = {}
        self._next = itertools.count()
        self._ids = UniqueIdGenerator(self.config.client_ip)
        self._instance: ClientInstance | None = None
        self._pending: set[asyncio.Future[Any]] = set()
        self._routed: dict[str, tuple[object, list[MessageQueue]]] = {}
        self._batcher = (
            Accumulator(
                self,
                AutoBatchSettings(
                    batch_max_delay_ms, batch_max_bytes, batch_max_count, total_batch_max_bytes
                ),
            )
            if auto_batch
            else None
        )
        #: Whether the brokers have had a heartbeat naming this producer since a request last needed one.
        self.announced_for_requests = False

    # --- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        self._instance = ClientInstance.get(self.config)
        self._instance.register_producer(self)
        await self._instance.start()

    async def shutdown(self) -> None:
        if self._batcher is not None:
            await self._batcher.close()  # gathered messages are sent, not dropped
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        if self._instance is not None:
            await self._instance.unregister(self.group, producer=True)
            self._instance = None

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    @property
    def instance(self) -> ClientInstance:
        if self._instance is None:
            raise MQClientError("producer is not started")
        return self._instance

    def published_topics(self) -> set[str]:
        return set(self._queues)

    # --- queues -------------------------------------------------------------------------------------

    async def queues_for(self, topic: str) -> list[MessageQueue]:
        """Writable queues of ``topic``; for a topic nobody created yet, the auto-create template's."""
        queues = self._queues.get(topic)
        route = self.instance.routes.get(topic)
        if route is not None:
            queues = self._route_queues(topic, route)
        if not queues:
            route = await self.instance.update_route(topic)
            if route is not None:
                queues = route.publish_queues(topic)
            else:
                template = await self.instance.update_route(AUTO_CREATE_TOPIC_KEY)
                if template is None:
                    raise MQClientError(f"no route info of topic {topic!r}, and topic auto-creation is off")
                queues = [
                    MessageQueue(topic, q.broker_name, i)
                    for q in template.queue_datas
                    for i in range(min(self.default_topic_queue_nums, q.read_queue_nums))
                ]
        if not queues:
            raise MQClientError(f"topic {topic!r} has no writable queue")
        self._queues[topic] = queues
        return queues

    def _route_queues(self, topic: str, route: Any) -> list[MessageQueue]:
        """The route's writable queues, worked out once per route object (a refresh brings a new one)."""
        cached = self._routed.get(topic)
        if cached is not None and cached[0] is route:
            return cached[1]
        queues: list[MessageQueue] = route.publish_queues(topic)
        self._routed[topic] = (route, queues)
        return queues

    def _known_queues(self, topic: str) -> list[MessageQueue] | None:
        """The queues of ``topic`` without a wait when its route (or the auto-create template's queues
        for it) is known, else None."""
        if self._instance is None:
            return None
        route = self._instance.routes.get(topic)
        if route is None:
            return self._queues.get(topic) or None
        return self._route_queues(topic, route) or None

    def _pick(self, queues: list[MessageQueue], last_broker: str | None) -> MessageQueue:
        """The next queue, round robin (Java MQFaultStrategy.selectOneMessageQueue). With fault avoidance
        on: the first whose broker is not being avoided. Off: the first not on ``last_broker``, the
        broker this send just failed on."""
        count = len(queues)
        if self.send_latency_fault_enable:
            start = next(self._next)
            for i in range(count):
                mq = queues[(start + i) % count]
                if self._faults.available(mq.broker_name):
                    return mq
            least = self._faults.least_bad(sorted({q.broker_name for q in queues}))
            on_least = [q for q in queues if q.broker_name == least]
            return on_least[next(self._next) % len(on_least)] if on_least else queues[start % count]
        if last_broker is not None:
            for _ in range(count):
                mq = queues[next(self._next) % count]
                if mq.broker_name != last_broker:
                    return mq
        return queues[next(self._next) % count]

    def _record_latency(self, broker_name: str, latency_ms: float, failed: bool) -> None:
        if self.send_latency_fault_enable:
            self._faults.update(broker_name, latency_ms, isolation=failed)

    # --- sending ------------------------------------------------------------------------------------

    def _check_body(self, body: bytes) -> None:
        if not isinstance(body, bytes | bytearray) or not body:
            raise MQClientError("message body must be non-empty bytes")
        if len(body) > self.max_message_size:
            raise MQClientError(
                f"message body of {len(body)} bytes exceeds the maximum message size {self.max_message_size}"
            )

    def _prepare(
        self, msg: Message, deliver_at: datetime | int | None = None, delay: timedelta | None = None
    ) -> tuple[str, bytes, dict[str, str], int]:
        validate_topic(msg.topic)
        self._check_body(msg.body)
        props = msg.wire_properties()
        due = deliver_time_ms(deliver_at, delay)
        if due is not None:
            props[Prop.TIMER_DELIVER_MS] = str(due)
        props.setdefault(Prop.UNIQ_KEY, self._ids.next_id())
        body, sys_flag = bytes(msg.body), 0
        if len(body) >= self.compress_over:
            body, sys_flag = compress_body(body, self.compress_level), SysFlag.COMPRESSED
        if is_reply(props):  # the cluster's reply topic is nobody's namespace
            return msg.topic, body, props, sys_flag
        return wrap_namespace(self.config.namespace, msg.topic), body, props, sys_flag

    async def send(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: QueueSelector | None = None,
        arg: Any = None,
        sharding_key: str | None = None,
        timeout: float | None = None,
        deliver_at: datetime | int | None = None,
        delay: timedelta | None = None,
    ) -> SendResult:
        """Send and wait for the broker's answer. With ``queue``, ``selector`` or ``sharding_key`` the
        message goes to that one queue (ordered sending) and is not retried elsewhere. ``deliver_at``
        (a datetime or epoch ms) or ``delay`` make it a timer message, delivered to consumers then
        (docs/protocols/rocketmq-messages.md#timer-messages). With ``auto_batch`` a plain message joins
        its queue's next batch send (docs/clients.md#auto-batching)."""
        batcher = self._batcher
        if batcher is not None and batcher.batchable(msg, {"deliver_at": deliver_at, "delay": delay}):
            validate_topic(msg.topic)
            wire_topic = wrap_namespace(self.config.namespace, msg.topic)
            queues = await self.queues_for(wire_topic)
            await batcher.wait_for_room()
            return await batcher.submit(
                msg,
                queues,
                queue=queue,
                selector=selector,
                arg=arg,
                sharding_key=sharding_key,
                timeout=timeout,
            )
        topic, body, props, sys_flag = self._prepare(msg, deliver_at, delay)
        deadline = time.monotonic() + (timeout or self.send_timeout)
        queues = await self.queues_for(topic)  # also names an explicit queue's broker address
        if sharding_key is not None:
            selector, arg = select_by_hash, sharding_key
        if selector is not None:
            queue = selector(queues, msg, arg)
        if queue is not None:
            return await self._send_to(queue, msg, topic, body, props, sys_flag, deadline)
        return await self._send_retrying(msg, topic, body, props, sys_flag, queues, deadline, timeout)

    async def _send_retrying(
        self,
        msg: Message,
        topic: str,
        body: bytes,
        props: dict[str, str],
        sys_flag: int,
        queues: list[MessageQueue],
        deadline: float,
        timeout: float | None,
        *,
        attempts: int = 0,
        last_broker: str | None = None,
        last_error: BaseException | None = None,
    ) -> SendResult:
        """The attempts of a plain send left after ``attempts`` (send_async's fast path hands over here
        after a failure it must retry), each on another queue than the broker that just failed."""
        for _attempt in range(1 + self.retry_times - attempts):
            if time.monotonic() >= deadline:
                break
            attempts += 1
            mq = self._pick(queues, last_broker)
            started = time.monotonic()
            try:
                result = await self._send_to(mq, msg, topic, body, props, sys_flag, deadline)
            except (RemotingError, MQClientError, api.BrokerError) as exc:
                if not retryable(exc):
                    raise
                last_error, last_broker = exc, mq.broker_name
                self._record_latency(mq.broker_name, (time.monotonic() - started) * 1000, failed=True)
                log.warning("send to %s failed (%s), retrying on another queue", mq, exc)
                continue
            self._record_latency(mq.broker_name, (time.monotonic() - started) * 1000, failed=False)
            return result
        raise self._send_failed(f"send to {msg.topic!r}", attempts, deadline, timeout, last_error)

    def _send_failed(
        self,
        what: str,
        attempts: int,
        deadline: float,
        timeout: float | None,
        last_error: BaseException | None,
    ) -> MQClientError:
        """The error for a send that got no success: "ran out of time" when the send timeout was used up
        (as Java's "call timeout"), else how many attempts failed."""
        tried = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        if time.monotonic() >= deadline:
            return MQClientError(
                f"{what} ran out of time: no success within the {timeout or self.send_timeout:g} s send "
                f"timeout ({tried}; last error: {last_error})"
            )
        return MQClientError(f"{what} failed after {tried}: {last_error}")

    async def _send_to(
        self,
        mq: MessageQueue,
        msg: Message,
        topic: str,
        body: bytes,
        props: dict[str, str],
        sys_flag: int,
        deadline: float,
    ) -> SendResult:
        for hook in self.interceptors:
            hook(msg, mq, None, None)
        request = api.send_request(self._header(topic, mq.queue_id, sys_flag, props), body)
        if is_reply(props):  # as Java's client: a reply message goes out as SEND_REPLY_MESSAGE_V2
            request.code = RequestCode.SEND_REPLY_MESSAGE_V2
        try:
            result = await self._invoke(mq, request, deadline, props[Prop.UNIQ_KEY])
        except BaseException as exc:
            for hook in self.interceptors:
                hook(msg, mq, None, exc)
            raise
        for hook in self.interceptors:
            hook(msg, mq, result, None)
        return result

    def _header(
        self, topic: str, queue_id: int, sys_flag: int, props: dict[str, str], *, batch: bool = False
    ) -> SendMessageRequestHeader:
        reconsume = max_reconsume = None
        if topic.startswith(RETRY_PREFIX):
            props = dict(props)  # the header takes these over on every attempt, not only the first
            reconsume = int(props.pop(Prop.RECONSUME_TIME, "0") or 0)
            max_reconsume = int(props.pop(Prop.MAX_RECONSUME_TIMES, "16") or 16)
        return api.send_header(
            topic,
            queue_id=queue_id,
            properties=encode_properties(props),
            producer_group=self.group,
            sys_flag=sys_flag,
            batch=batch,
            reconsume_times=reconsume,
            max_reconsume_times=max_reconsume,
            default_topic_queue_nums=self.default_topic_queue_nums,
        )

    async def _invoke(
        self, mq: MessageQueue, request: RemotingCommand, deadline: float, msg_id: str
    ) -> SendResult:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise MQClientError("send timed out before it could be attempted")
        conn = await self.instance.broker_connection(mq.broker_name)
        resp = await conn.invoke(request, remaining)
        return self.send_result(mq, resp, msg_id)

    def send_result(self, mq: MessageQueue, resp: RemotingCommand, msg_id: str) -> SendResult:
        """The SendResult of a send's answer, or the broker's error."""
        status = _STATUS.get(resp.code)
        if status is None:
            raise api.BrokerError(resp.code, resp.remark)
        ext = resp.ext_fields
        queue = MessageQueue(
            strip_namespace(self.config.namespace, mq.topic), mq.broker_name, int(ext["queueId"])
        )
        return SendResult(status, msg_id, ext["msgId"], queue, int(ext["queueOffset"]))

    def send_async(
        self,
        msg: Message,
        callback: SendCallback | None = None,
        **kwargs: Any,
    ) -> asyncio.Future[SendResult]:
        """Start a send and return at once; the future (and ``callback``) get the result. With
        ``auto_batch`` a plain message to a topic whose route is known joins a batch without a task."""
        batcher = self._batcher
        if batcher is not None and batcher.has_room() and batcher.batchable(msg, kwargs):
            topic = msg.topic
            queues = self._known_queues(wrap_namespace(self.config.namespace, topic))
            if queues is not None and well_formed_name(topic):
                if not kwargs:
                    return batcher.submit(msg, queues, callback=callback)
                return batcher.submit(
                    msg,
                    queues,
                    queue=kwargs.get("queue"),
                    selector=kwargs.get("selector"),
                    arg=kwargs.get("arg"),
                    sharding_key=kwargs.get("sharding_key"),
                    timeout=kwargs.get("timeout"),
                    callback=callback,
                )
        if batcher is None and not kwargs.keys() - {"timeout"}:
            started = start_send(self, msg, kwargs.get("timeout"))
            if started is not None:
                return self._track(started, callback)
        return self._track(asyncio.ensure_future(self.send(msg, **kwargs)), callback)

    # --- request-reply (docs/protocols/rocketmq-request-reply.md) ---------------------------------------

    async def request(self, msg: Message, timeout: float = 3.0) -> MessageExt:
        """Send ``msg`` and wait for the reply its consumer sends back (Java DefaultMQProducer.request);
        ``timeout`` in seconds covers both. No reply in time raises ``RequestTimeoutError``."""
        return await send_request_for_reply(self, msg, timeout)

    def request_async(
        self,
        msg: Message,
        timeout: float = 3.0,
        callback: Callable[[MessageExt | None, BaseException | None], None] | None = None,
    ) -> asyncio.Task[MessageExt]:
        """Start a request and return at once; the task (and ``callback``) get the reply."""
        return self._track(asyncio.ensure_future(self.request(msg, timeout)), callback)

    def _track(self, work: _F, callback: Callable[[Any, BaseException | None], None] | None) -> _F:
        """Keep ``work`` (a task, or the fast path's future) for shutdown to wait for; ``callback(result,
        error)`` when it is done."""
        self._pending.add(work)
        work.add_done_callback(
            self._pending.discard if callback is None else _callback_of(callback, self._pending)
        )
        return work

    async def reply(self, request: MessageExt, body: bytes, timeout: float | None = None) -> SendResult:
        """Answer a consumed request: ``create_reply`` and send it. The broker answers SUCCESS only once
        the requester has the reply; a requester that left makes this raise the broker's error."""
        return await self.send(create_reply(request, body), timeout=timeout)

    async def send_oneway(
        self, msg: Message, *, deliver_at: datetime | int | None = None, delay: timedelta | None = None
    ) -> None:
        """Fire and forget: no answer is awaited and nothing is retried."""
        topic, body, props, sys_flag = self._prepare(msg, deliver_at, delay)
        mq = self._pick(await self.queues_for(topic), None)
        request = api.send_request(self._header(topic, mq.queue_id, sys_flag, props), body)
        conn = await self.instance.broker_connection(mq.broker_name)
        conn.invoke_oneway(request)

    async def send_batch(
        self, msgs: Sequence[Message], *, queue: MessageQueue | None = None, timeout: float | None = None
    ) -> SendResult:
        """Send messages of one topic in one request; they get consecutive offsets in one queue."""
        if not msgs:
            raise MQClientError("batch is empty")
        topic = msgs[0].topic
        validate_topic(topic)
        if topic.startswith(RETRY_PREFIX):
            raise MQClientError("batch messages cannot be sent to a retry topic")
        parts: list[bytes] = []
        ids = self._ids.next_ids(len(msgs))
        for i, msg in enumerate(msgs):
            if msg.topic != topic:
                raise MQClientError("all messages of a batch must have the same topic")
            self._check_body(msg.body)
            if msg.deliver_at is not None or msg.delay is not None or Prop.TIMER_DELIVER_MS in msg.properties:
                # A broker delivers a batched message at once whatever its timer says: refuse it here.
                raise MQClientError("batch messages cannot be timer messages: send them one by one")
            if msg.properties or msg.tags or msg.keys or msg.delay_level:
                if msg.delay_level > 0:
                    raise MQClientError("batch messages do not support a delay level")
                props = msg.wire_properties()
                props.pop(Prop.WAIT, None)
                ids[i] = props.setdefault(Prop.UNIQ_KEY, ids[i])
                text = encode_properties(props)
            else:  # the common case, without building a dict per message
                text = _UNIQ_ONLY + ids[i]
            add_item(parts, msg.flag, msg.body, text)  # batches are never compressed
        wire_topic = wrap_namespace(self.config.namespace, topic)
        deadline = time.monotonic() + (timeout or self.send_timeout)
        batch_body = b"".join(parts)
        if len(batch_body) > self.max_message_size:
            raise MQClientError(
                f"batch of {len(batch_body)} bytes exceeds the maximum message size {self.max_message_size}"
            )
        routed_queues = await self.queues_for(wire_topic)  # also names an explicit queue's broker address
        last_error: BaseException | None = None
        last_broker: str | None = None
        attempts = 0
        for _attempt in range(1 + (0 if queue else self.retry_times)):
            if time.monotonic() >= deadline:
                break
            attempts += 1
            mq = queue or self._pick(routed_queues, last_broker)
            header = self._header(wire_topic, mq.queue_id, 0, {Prop.WAIT: "true"}, batch=True)
            request = api.send_request(header, batch_body)
            started = time.monotonic()
            try:
                result = await self._invoke(mq, request, deadline, ",".join(ids))
            except (RemotingError, MQClientError, api.BrokerError) as exc:
                if not retryable(exc):
                    raise
                last_error, last_broker = exc, mq.broker_name
                self._record_latency(mq.broker_name, (time.monotonic() - started) * 1000, failed=True)
                continue
            self._record_latency(mq.broker_name, (time.monotonic() - started) * 1000, failed=False)
            return result
        raise self._send_failed(f"batch send to {topic!r}", attempts, deadline, timeout, last_error)
