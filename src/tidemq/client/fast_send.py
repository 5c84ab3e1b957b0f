"""``send_async``'s fast path: a plain send whose route and broker connection are already there is written
with the transport's ``invoke_future`` and turned into its SendResult in a done-callback, without a task
or a coroutine chain (a task and four coroutine frames per send were most of a single-message producer's
CPU). A failure ``send`` would retry hands the remaining attempts to the usual path, within the same
deadline, so both paths retry and report alike (docs/performance.md#single-sends).

This is a method of ``Producer`` kept in its own file for the producer module's size: it uses the
producer's private members (route cache, queue pick, header, latency record, retry loop) as the
producer's own methods do, and nothing else calls them from outside."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from tidemq.client import api
from tidemq.client.fault import retryable
from tidemq.client.instance import MQClientError
from tidemq.client.message import Message, SendResult
from tidemq.client.request import is_reply
from tidemq.record import Prop
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.transport import RemotingError

if TYPE_CHECKING:
    from tidemq.client.producer import Producer

log = logging.getLogger("tidemq.client.producer")  # one logger for both paths of a send


def start_send(producer: Producer, msg: Message, timeout: float | None) -> asyncio.Future[SendResult] | None:
    """Write ``msg``'s first attempt now and return the future of its result, or None when the send
    needs the usual path: interceptors, a message ``_prepare`` refuses (the usual path raises that into
    the future), a reply, a route not yet known or a broker connection not yet open."""
    instance = producer._instance
    if instance is None or producer.interceptors:
        return None
    try:
        topic, body, props, sys_flag = producer._prepare(msg)
    except (MQClientError, ValueError):
        return None
    if is_reply(props):
        return None
    queues = producer._known_queues(topic)
    if queues is None:
        return None
    mq = producer._pick(queues, None)
    conn = instance.open_broker_connection(mq.broker_name)
    if conn is None:
        return None
    timeout_s = timeout or producer.send_timeout
    started = time.monotonic()
    deadline = started + timeout_s
    request = api.send_request(producer._header(topic, mq.queue_id, sys_flag, props), body)
    try:
        answer = conn.invoke_future(request, timeout_s)
    except RemotingError:
        return None
    outer: asyncio.Future[SendResult] = answer.get_loop().create_future()
    msg_id = props[Prop.UNIQ_KEY]

    def answered(fut: asyncio.Future[RemotingCommand]) -> None:
        if outer.done():  # the caller cancelled it: the answer is dropped, the connection goes on
            return
        latency_ms = (time.monotonic() - started) * 1000
        exc: BaseException
        try:
            result = producer.send_result(mq, fut.result(), msg_id)
        except (asyncio.CancelledError, Exception) as failure:
            exc = failure
        else:
            producer._record_latency(mq.broker_name, latency_ms, failed=False)
            outer.set_result(result)
            return
        if not retryable(exc):
            outer.set_exception(exc)
            return
        producer._record_latency(mq.broker_name, latency_ms, failed=True)
        log.warning("send to %s failed (%s), retrying on another queue", mq, exc)
        if producer.retry_times < 1 or time.monotonic() >= deadline:
            outer.set_exception(producer._send_failed(f"send to {msg.topic!r}", 1, deadline, timeout, exc))
            return
        rest = asyncio.ensure_future(
            producer._send_retrying(
                msg,
                topic,
                body,
                props,
                sys_flag,
                queues,
                deadline,
                timeout,
                attempts=1,
                last_broker=mq.broker_name,
                last_error=exc,
            )
        )
        rest.add_done_callback(lambda task: _settle(outer, task))
        outer.add_done_callback(lambda _: rest.cancel())  # a no-op once ``rest`` is done

    answer.add_done_callback(answered)
    return outer


def _settle(outer: asyncio.Future[SendResult], task: asyncio.Future[SendResult]) -> None:
    if outer.done():
        return
    if task.cancelled():
        outer.cancel()
    elif (exc := task.exception()) is not None:
        outer.set_exception(exc)
    else:
        outer.set_result(task.result())
