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
from tidemq.record import MessageExt, Prop, encode_properties
from tidemq.remoting.codes import ResponseCode
from tidemq.remoting.names import RETRY_PREFIX
from tidemq.remoting.route import MASTER_ID

if TYPE_CHECKING:
    from tidemq.client.consumer.core import ConsumerCore

log = logging.getLogger(__name__)

DELAY_FLOW_CONTROL_S = 0.05
DELAY_ON_ERROR_S = 3.0
DELAY_BROKER_FLOW_CONTROL_S = 0.02
DELAY_WHEN_PAUSED_S = 1.0
DELAY_NOT_LOCKED_S = 3.0


def prepare_pulled(
    core: ConsumerCore, mq: MessageQueue, sub: Subscription, result: api.PullResult
) -> list[MessageExt]:
    """Client-side tag re-filter (the broker filters by hash only), retry-topic restore, offset hints."""
    out = []
    namespace = core.config.namespace
    every_tag = not sub.tags
    broker_name = mq.broker_name
    offset_hints = encode_properties(
        {Prop.MIN_OFFSET: str(result.min_offset), Prop.MAX_OFFSET: str(result.max_offset)}
    )
    for msg in result.messages():  # properties are decoded only where they are read
        if not every_tag and msg.properties.get(Prop.TAGS) not in sub.tags:
            continue
        msg.broker_name = broker_name
        if msg.topic.startswith(RETRY_PREFIX) and Prop.RETRY_TOPIC in msg.properties:
            msg.topic = msg.properties[Prop.RETRY_TOPIC]
        if namespace:
            msg.topic = strip_namespace(namespace, msg.topic)
        msg.add_properties(offset_hints)
        out.append(msg)
    return out


class _PullRequest:
    """One owned queue's pull state (Java's PullRequest): where to pull next, and from which broker."""

    def __init__(self, core: ConsumerCore, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None:
        self.core = core
        self.mq = mq
        self.pq = pq
        self.next_offset = next_offset
        self.broker_id = MASTER_ID  # which broker of the queue's broker name to pull from, as advised
        self.clustering = core.message_model is MessageModel.CLUSTERING
        self.flow_controls = 0
        self.previously_locked = False

    async def ready(self) -> Subscription | None:
        """The subscription to pull with, or None after waiting out a reason not to pull now."""
        core, pq = self.core, self.pq
        if core.paused:
            await asyncio.sleep(DELAY_WHEN_PAUSED_S)
            return None
        reason = flow_control_reason(core, pq)
        if reason:
            self.flow_controls += 1
            if self.flow_controls % 1000 == 1:
                log.warning(
                    "flow control on %s: %s (%d times so far); pulling again in 50 ms",
                    self.mq,
                    reason,
                    self.flow_controls,
                )
            await asyncio.sleep(DELAY_FLOW_CONTROL_S)
            return None
        if core.orderly and self.clustering:
            if not pq.locked:
                await asyncio.sleep(DELAY_NOT_LOCKED_S)
                return None
            if not self.previously_locked:
                self.previously_locked = True
                offset = await core.compute_pull_from_where(self.mq)
                if offset >= 0:
                    self.next_offset = offset
        sub = core.subscriptions.get(self.mq.topic)
        if sub is None:
            await asyncio.sleep(DELAY_ON_ERROR_S)
        return sub

    async def start(self, sub: Subscription) -> api.PendingPull:
        """Write the pull for ``next_offset`` (no wait when the connection is open)."""
        core, mq = self.core, self.mq
        addr = core.instance.brokers.get(mq.broker_name, {}).get(self.broker_id)
        if addr is None:
            self.broker_id = MASTER_ID  # the suggested slave is unknown: back to the master
        # Only a master may take the committed offset along (Java clears the flag for slaves).
        commit = (
            await core.offset_store.read(mq, ReadMode.MEMORY)
            if self.clustering and self.broker_id == MASTER_ID
            else 0
        )
        if addr is None:
            conn = await core.instance.broker_connection(mq.broker_name)
        else:
            conn = await core.instance.connection(addr)
        header = api.pull_header(
            core.group,
            mq.topic,
            mq.queue_id,
            self.next_offset,
            max_nums=core.pull_batch_size,
            expression=sub.expression if core.post_subscription_when_pull else None,
            expression_type=sub.expression_type,
            suspend_ms=core.suspend_timeout_ms,
            commit_offset=max(0, commit),
        )
        return api.start_pull(conn, header)

    def may_pull_ahead(self, result: api.PullResult) -> bool:
        """Whether the next pull may go out before this answer is decoded: flow control counting the
        answer's messages (at most its offset advance) and bytes as if already cached."""
        core = self.core
        arriving = result.next_begin_offset - self.next_offset
        return (
            not core.paused
            and not core.orderly
            and flow_control_reason(core, self.pq, arriving, len(result.body)) is None
        )


async def pull_loop(core: ConsumerCore, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None:
    """Pull, hand over, pull again.  While a SUCCESS answer is being decoded the next pull is already on
    the wire (when flow control allows), so this side's decoding overlaps the broker's reading instead
    of the two taking turns."""
    request = _PullRequest(core, mq, pq, next_offset)
    ahead: tuple[api.PendingPull, Subscription] | None = None
    timeout = core.suspend_timeout_ms / 1000 + 15
    try:
        while not pq.dropped and core.running:
            try:
                if ahead is None:
                    sub = await request.ready()
                    if sub is None:
                        continue
                    pending = await request.start(sub)
                else:
                    (pending, sub), ahead = ahead, None
                result = await pending.result(timeout)
            except asyncio.CancelledError:
                raise
            except api.BrokerError as exc:
                delay = (
                    DELAY_BROKER_FLOW_CONTROL_S if exc.code == ResponseCode.FLOW_CONTROL else DELAY_ON_ERROR_S
                )
                log.warning("pull from %s refused: %s; retrying in %.2f s", mq, exc, delay)
                request.broker_id = MASTER_ID
                await asyncio.sleep(delay)
                continue
            except Exception as exc:
                request.broker_id = MASTER_ID
                if not pq.dropped:
                    log.warning("pull from %s failed: %s; retrying in %.0f s", mq, exc, DELAY_ON_ERROR_S)
                    await asyncio.sleep(DELAY_ON_ERROR_S)
                continue
            pq.last_pull_time = time.monotonic()
            request.broker_id = result.suggest_which_broker_id
            if pq.is_dropped():
                return
            if result.code == ResponseCode.SUCCESS:
                pull_ahead = request.may_pull_ahead(result)
                request.next_offset = result.next_begin_offset
                if pull_ahead:
                    try:
                        ahead = (await request.start(sub), sub)
                    except Exception as exc:  # the regular path retries and reports
                        log.debug("pulling %s ahead failed: %s", mq, exc)
                    # Let this loop pass write the pull out before the decoding below takes the CPU.
                    await asyncio.sleep(0)
                msgs = prepare_pulled(core, mq, sub, result)
                if msgs:
                    dispatch = pq.put(msgs)
                    core.consume_service.submit(msgs, pq, mq, dispatch)
            elif result.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
                request.next_offset = result.next_begin_offset
                if pq.msg_count == 0 and core.advance_offset_when_idle:
                    core.offset_store.update(mq, request.next_offset, increase_only=True)
            else:  # PULL_OFFSET_MOVED: fix the offset, persist it, and let rebalance start the queue again
                moved_to = result.next_begin_offset
                log.warning("offset %d of %s is illegal; moving to %d", request.next_offset, mq, moved_to)
                core.offset_store.update(mq, result.next_begin_offset)
                await core.offset_store.persist(mq)
                core.rebalancer.forget(mq)
                core.instance.rebalance_now()
                return
    finally:
        if ahead is not None:
            ahead[0].response.cancel()


def flow_control_reason(
    core: ConsumerCore, pq: ProcessQueue, arriving: int = 0, arriving_bytes: int = 0
) -> str | None:
    """Why not to pull now, if ``arriving`` more messages (``arriving_bytes``) were cached on top."""
    count, size, span = pq.msg_count + arriving, pq.msg_size + arriving_bytes, pq.span + arriving
    if count > core.pull_threshold_for_queue:
        return f"{count} cached messages > {core.pull_threshold_for_queue}"
    if size > core.pull_threshold_size_for_queue:
        limit_mib = core.pull_threshold_size_for_queue // (1024 * 1024)
        return f"{size // (1024 * 1024)} MiB cached > {limit_mib} MiB"
    if not core.orderly and span > core.consume_concurrently_max_span:
        return f"offset span {span} > {core.consume_concurrently_max_span}"
    return None
