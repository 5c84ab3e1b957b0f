"""Delayed delivery (Java ScheduleMessageService): one walker per delay level over SCHEDULE_TOPIC_XXXX.

A delayed message is stored in the schedule queue of its level with its delivery time as the tag
code; when due, it is stored again under its real topic and queue. Level offsets are persisted, so
delivery resumes where it stopped after a restart.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from tidemq.aio import cancel_and_wait, wait_or_timeout
from tidemq.record import Prop, decode_record
from tidemq.remoting.names import SCHEDULE_TOPIC
from tidemq.store import StoreError

if TYPE_CHECKING:
    from tidemq.broker.broker import Broker

log = logging.getLogger(__name__)


class ScheduleService:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.delays_ms = broker.config.delay_levels_ms
        self._wakeups = [asyncio.Event() for _ in self.delays_ms]
        self._tasks: list[asyncio.Task[None]] = []

    def tags_code(self, level: int, store_timestamp: int) -> int:
        """Delivery time of a message stored now at ``level`` (1-based)."""
        return store_timestamp + self.delays_ms[level - 1]

    def on_dispatch(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        if topic == SCHEDULE_TOPIC and 0 <= queue_id < len(self._wakeups):
            self._wakeups[queue_id].set()

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._run_level(level)) for level in range(1, len(self.delays_ms) + 1)
        ]

    async def close(self) -> None:
        await cancel_and_wait(self._tasks)

    async def _run_level(self, level: int) -> None:
        store = self.broker.store
        offsets = self.broker.delay_offsets
        queue_id = level - 1
        wakeup = self._wakeups[queue_id]
        while True:
            offset = offsets.get(SCHEDULE_TOPIC, level) or 0
            cq = store.find_queue(SCHEDULE_TOPIC, queue_id)
            if cq is not None and offset < cq.min_offset:
                offset = cq.min_offset
            entry = cq.entry(offset) if cq is not None else None
            if entry is None:
                wakeup.clear()
                await wait_or_timeout(wakeup, 1.0)
                continue
            phys, _size, deliver_at = entry
            wait_ms = deliver_at - int(time.time() * 1000)
            if wait_ms > 0:
                await asyncio.sleep(min(wait_ms, 1000) / 1000)
                continue
            if not self._deliver(phys):
                await asyncio.sleep(0.1)
                continue
            offsets.set(SCHEDULE_TOPIC, level, offset + 1)

    def _deliver(self, phys: int) -> bool:
        data = self.broker.store.read_message(phys)
        if data is None:
            log.warning("schedule: message at %d is gone, skipping it", phys)
            return True
        msg = decode_record(data, decompress=False)
        props = dict(msg.properties)
        real_topic = props.get(Prop.REAL_TOPIC)
        real_qid = props.get(Prop.REAL_QID)
        if real_topic is None or real_qid is None or not real_qid.lstrip("-").isdigit():
            log.warning("schedule: message at %d has no REAL_TOPIC/REAL_QID, dropping it", phys)
            return True
        request = self.broker.make_append_again(
            msg,
            topic=real_topic,
            queue_id=int(real_qid),
            properties=props,
            reconsume_times=msg.reconsume_times,
            schedule=False,
        )
        try:
            self.broker.store.put([request])
        except StoreError as exc:
            log.error("schedule: cannot deliver message at %d: %s", phys, exc)
            return False
        return True
