"""The pull loop of one pull request (Java PullMessageService + pullMessage + PullCallback).

Each owned queue has one loop: check flow control, long-poll the broker, put what came into the process
queue and hand it to the consume service, then pull again from the next offset.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from tidemq.client import api
from tidemq.client.config import strip_namespace
from tidemq.client.consumer.offset_store import ReadMode
from tidemq.client.consumer.process_queue import ProcessQueue
from tidemq.client.consumer.types import MessageModel, Subscription
from tidemq.client.message_queue import MessageQueue
from tidemq.remoting.codes import ResponseCode
from tidemq.remoting.message import MessageExt, Prop
from tidemq.remoting.route import MASTER_ID

if TYPE_CHECKING:
    from tidemq.client.consumer.push import PushConsumer

log = logging.getLogger(__name__)

DELAY_FLOW_CONTROL_S = 0.05
DELAY_ON_ERROR_S = 3.0
DELAY_BROKER_FLOW_CONTROL_S = 0.02
DELAY_WHEN_PAUSED_S = 1.0
DELAY_NOT_LOCKED_S = 3.0
RETRY_PREFIX = "%RETRY%"


def prepare_pulled(
    consumer: PushConsumer, mq: MessageQueue, sub: Subscription, result: api.PullResult
) -> list[MessageExt]:
    """Client-side tag re-filter (the broker filters by hash only), retry-topic restore, offset hints."""
    out = []
    namespace = consumer.config.namespace
    min_offset, max_offset = str(result.min_offset), str(result.max_offset)
    for msg in result.messages:
        if not sub.matches(msg.tags):
            continue
        msg.broker_name = mq.broker_name
        props = msg.properties
        if msg.topic.startswith(RETRY_PREFIX) and Prop.RETRY_TOPIC in props:
            msg.topic = props[Prop.RETRY_TOPIC]
        msg.topic = strip_namespace(namespace, msg.topic)
        props[Prop.MIN_OFFSET] = min_offset
        props[Prop.MAX_OFFSET] = max_offset
        out.append(msg)
    return out


async def pull_loop(consumer: PushConsumer, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None:
    flow_controls = 0
    previously_locked = False
    broker_id = MASTER_ID  # which broker of the queue's broker name to pull from next, as the broker advises
    clustering = consumer.message_model is MessageModel.CLUSTERING
    while not pq.dropped and consumer.running:
        if consumer.paused:
            await asyncio.sleep(DELAY_WHEN_PAUSED_S)
            continue
        reason = _flow_control_reason(consumer, pq)
        if reason:
            flow_controls += 1
            if flow_controls % 1000 == 1:
                log.warning(
                    "flow control on %s: %s (%d times so far); pulling again in 50 ms",
                    mq,
                    reason,
                    flow_controls,
                )
            await asyncio.sleep(DELAY_FLOW_CONTROL_S)
            continue
        if consumer.orderly and clustering:
            if not pq.locked:
                await asyncio.sleep(DELAY_NOT_LOCKED_S)
                continue
            if not previously_locked:
                previously_locked = True
                offset = await consumer.compute_pull_from_where(mq)
                if offset >= 0:
                    next_offset = offset
        sub = consumer.subscriptions.get(mq.topic)
        if sub is None:
            await asyncio.sleep(DELAY_ON_ERROR_S)
            continue
        addr = consumer.instance.brokers.get(mq.broker_name, {}).get(broker_id)
        if addr is None:
            broker_id = MASTER_ID  # the suggested slave is unknown: back to the master
        # Only a master may take the committed offset along (Java clears the flag for slaves).
        commit = (
            await consumer.offset_store.read(mq, ReadMode.MEMORY)
            if clustering and broker_id == MASTER_ID
            else 0
        )
        try:
            if addr is None:
                conn = await consumer.instance.broker_connection(mq.broker_name)
            else:
                conn = await consumer.instance.connection(addr)
            result = await api.pull_message(
                conn,
                consumer.group,
                mq.topic,
                mq.queue_id,
                next_offset,
                max_nums=consumer.pull_batch_size,
                expression=sub.expression if consumer.post_subscription_when_pull else None,
                suspend_ms=consumer.suspend_timeout_ms,
                commit_offset=max(0, commit),
                timeout=consumer.suspend_timeout_ms / 1000 + 15,
            )
        except asyncio.CancelledError:
            raise
        except api.BrokerError as exc:
            delay = DELAY_BROKER_FLOW_CONTROL_S if exc.code == ResponseCode.FLOW_CONTROL else DELAY_ON_ERROR_S
            log.warning("pull from %s refused: %s; retrying in %.2f s", mq, exc, delay)
            broker_id = MASTER_ID
            await asyncio.sleep(delay)
            continue
        except Exception as exc:
            broker_id = MASTER_ID
            if not pq.dropped:
                log.warning("pull from %s failed: %s; retrying in %.0f s", mq, exc, DELAY_ON_ERROR_S)
                await asyncio.sleep(DELAY_ON_ERROR_S)
            continue
        pq.last_pull_time = time.monotonic()
        broker_id = result.suggest_which_broker_id
        if pq.is_dropped():
            return
        if result.code == ResponseCode.SUCCESS:
            next_offset = result.next_begin_offset
            msgs = prepare_pulled(consumer, mq, sub, result)
            if msgs:
                dispatch = pq.put(msgs)
                consumer.consume_service.submit(msgs, pq, mq, dispatch)
        elif result.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
            next_offset = result.next_begin_offset
            if pq.msg_count == 0 and consumer.advance_offset_when_idle:
                consumer.offset_store.update(mq, next_offset, increase_only=True)
        else:  # PULL_OFFSET_MOVED: fix the offset, persist it, and let rebalance start the queue again
            log.warning("offset %d of %s is illegal; moving to %d", next_offset, mq, result.next_begin_offset)
            consumer.offset_store.update(mq, result.next_begin_offset)
            await consumer.offset_store.persist(mq)
            consumer.rebalancer.forget(mq)
            consumer.instance.rebalance_now()
            return


def _flow_control_reason(consumer: PushConsumer, pq: ProcessQueue) -> str | None:
    if pq.msg_count > consumer.pull_threshold_for_queue:
        return f"{pq.msg_count} cached messages > {consumer.pull_threshold_for_queue}"
    if pq.msg_size > consumer.pull_threshold_size_for_queue:
        limit_mib = consumer.pull_threshold_size_for_queue // (1024 * 1024)
        return f"{pq.msg_size // (1024 * 1024)} MiB cached > {limit_mib} MiB"
    if not consumer.orderly and pq.span > consumer.consume_concurrently_max_span:
        return f"offset span {pq.span} > {consumer.consume_concurrently_max_span}"
    return None
