"""Rebalance (Java RebalanceImpl): decide which queues this instance owns and keep one process queue and
one pull loop per owned queue. Runs every 20 s, at start, and when the broker says the group changed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tidemq.aio import cancel_and_wait
from tidemq.client import api
from tidemq.client.consumer.process_queue import ProcessQueue
from tidemq.client.consumer.pulling import pull_loop
from tidemq.client.consumer.types import MessageModel
from tidemq.client.message_queue import MessageQueue
from tidemq.client.route import TopicRoute
from tidemq.remoting.route import MASTER_ID

if TYPE_CHECKING:
    from tidemq.client.consumer.core import ConsumerCore

log = logging.getLogger(__name__)
UNLOCK_WAIT_S = 1.0


def stale_queues(
    process_queues: Mapping[MessageQueue, ProcessQueue], topic: str, mine: set[MessageQueue]
) -> list[MessageQueue]:
    """The owned queues of ``topic`` to drop: allocated elsewhere now, not pulled for too long, or dropped.
    A stale queue that is still allocated here starts again in the same round, from its stored offset."""
    return [
        mq
        for mq, pq in process_queues.items()
        if mq.topic == topic and (mq not in mine or pq.pull_expired or pq.dropped)
    ]


class Rebalancer:
    """Owns the process queues and pull loops of one consumer core (Java RebalanceImpl)."""

    def __init__(self, core: ConsumerCore) -> None:
        self.core = core
        self.process_queues: dict[MessageQueue, ProcessQueue] = {}
        self._pulls: dict[MessageQueue, asyncio.Task[None]] = {}
        self._lock = asyncio.Lock()

    async def rebalance(self) -> None:
        async with self._lock:
            if not self.core.running:
                return
            for topic in list(self.core.subscriptions):
                try:
                    await self._rebalance_topic(topic)
                except Exception as exc:
                    log.warning("rebalance of %s for group %s failed: %s", topic, self.core.group, exc)
            for mq in [mq for mq in self.process_queues if mq.topic not in self.core.subscriptions]:
                await self._drop(mq)

    async def _rebalance_topic(self, topic: str) -> None:
        core = self.core
        instance = core.instance
        route = await instance.route(topic)
        if route is None:
            log.warning("group %s: topic %s has no route yet", core.group, topic)
            return
        mq_all = route.subscribe_queues(topic)
        assigned = core.assigned_queues(topic)
        if assigned is not None:
            mine = assigned & set(mq_all)
        elif core.message_model is MessageModel.BROADCASTING:
            mine = set(mq_all)
        else:
            cids = await self._consumer_ids(route)
            if not cids or not mq_all:
                log.info("group %s: no consumer list or queues for %s this round", core.group, topic)
                return
            mine = set(core.allocate.allocate(core.group, instance.client_id, sorted(mq_all), sorted(cids)))
        await self._apply(topic, mine)

    async def _consumer_ids(self, route: TopicRoute) -> list[str] | None:
        masters = [b.addrs[MASTER_ID] for b in route.brokers.values() if MASTER_ID in b.addrs]
        if not masters:
            return None
        conn = await self.core.instance.connection(random.choice(masters))
        return await api.consumer_ids(conn, self.core.group)

    async def _apply(self, topic: str, mine: set[MessageQueue]) -> None:
        changed = False
        for mq in stale_queues(self.process_queues, topic, mine):
            if await self._drop(mq):
                changed = True
        orderly_clustering = self.core.orderly and self.core.message_model is MessageModel.CLUSTERING
        for mq in sorted(mine - self.process_queues.keys()):
            if orderly_clustering and not await self.lock(mq):
                log.info(
                    "group %s: %s is locked by another consumer; trying next round",
                    self.core.group,
                    mq,
                )
                continue
            self.core.offset_store.remove(mq)
            offset = await self.core.compute_pull_from_where(mq)
            if offset < 0:
                log.warning("group %s: cannot find where to start %s; trying next round", self.core.group, mq)
                continue
            pq = ProcessQueue()
            if self.core.orderly:
                pq.locked, pq.last_lock_time = True, time.monotonic()
            self.process_queues[mq] = pq
            self._pulls[mq] = asyncio.create_task(pull_loop(self.core, mq, pq, offset))
            changed = True
        if changed:
            owned = sorted(q.queue_id for q in self.process_queues if q.topic == topic)
            log.info(
                "group %s (%s): now owns %s queues %s",
                self.core.group,
                self.core.instance.client_id,
                topic,
                owned,
            )

    async def _drop(self, mq: MessageQueue) -> bool:
        """Stop a queue: persist its offset; when orderly, wait for its batch and unlock it on the broker."""
        pq = self.process_queues.get(mq)
        if pq is None:
            return False
        pq.dropped = True
        task = self._pulls.pop(mq, None)
        if task is not None:
            task.cancel()
        store = self.core.offset_store
        await store.persist(mq)
        store.remove(mq)
        if self.core.orderly and self.core.message_model is MessageModel.CLUSTERING:
            try:
                async with asyncio.timeout(UNLOCK_WAIT_S):
                    await pq.consume_lock.acquire()
            except TimeoutError:
                pq.try_unlock_times += 1
                log.info("%s is still being consumed; unlocking it next round", mq)
                return False
            try:
                await self.unlock([mq])
            finally:
                pq.consume_lock.release()
        del self.process_queues[mq]
        return True

    def forget(self, mq: MessageQueue) -> None:
        """Drop a queue whose offset was illegal; the next rebalance starts it again from the fixed offset."""
        pq = self.process_queues.pop(mq, None)
        if pq is not None:
            pq.dropped = True
        self._pulls.pop(mq, None)

    # --- orderly locks ---------------------------------------------------------------------------------

    async def lock(self, mq: MessageQueue) -> bool:
        locked = await self._lock_on_broker(mq.broker_name, [mq])
        return mq in locked

    async def lock_all(self) -> None:
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in self.process_queues:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker_name, mqs in by_broker.items():
            locked = await self._lock_on_broker(broker_name, mqs)
            for mq in mqs:
                pq = self.process_queues.get(mq)
                if pq is not None and mq not in locked:
                    pq.locked = False
                    log.warning("group %s: lost the lock of %s", self.core.group, mq)

    async def _lock_on_broker(self, broker_name: str, mqs: list[MessageQueue]) -> set[MessageQueue]:
        try:
            conn = await self.core.instance.broker_connection(broker_name)
            answer = await api.lock_batch(
                conn, self.core.group, self.core.instance.client_id, [mq.to_json() for mq in mqs]
            )
        except Exception as exc:
            log.warning("locking queues on %s failed: %s", broker_name, exc)
            return set()
        locked = {MessageQueue.from_json(item) for item in answer}
        for mq in locked:
            pq = self.process_queues.get(mq)
            if pq is not None:
                pq.locked, pq.last_lock_time = True, time.monotonic()
        return locked

    async def unlock(self, mqs: list[MessageQueue]) -> None:
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker_name, items in by_broker.items():
            with contextlib.suppress(Exception):
                conn = await self.core.instance.broker_connection(broker_name)
                await api.unlock_batch(
                    conn,
                    self.core.group,
                    self.core.instance.client_id,
                    [mq.to_json() for mq in items],
                )

    async def stop_pulling(self) -> None:
        """Shutdown's first step: no more pulls or rebalances. The process queues stay, not dropped, so
        what they hold can still be consumed and its offsets committed."""
        async with self._lock:  # no rebalance may start pull loops while we stop them
            tasks = list(self._pulls.values())
            self._pulls.clear()
        await cancel_and_wait(tasks)

    def drop_all(self) -> None:
        """Shutdown's last step, once the consume service has drained and the offsets are persisted."""
        for pq in self.process_queues.values():
            pq.dropped = True
