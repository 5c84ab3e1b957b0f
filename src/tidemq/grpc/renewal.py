"""Auto-renewed receipt handles: what the 5.x proxy does for a receive with ``auto_renew`` (its
ReceiptHandleProcessor and DefaultReceiptHandleManager), which the SDKs' PushConsumer sends.

A push consumer does not choose an invisible time: the receive leases each message for a renew slice
(60 s), and the proxy keeps the handle alive until the client acks or nacks it, renewing it a little
before it would expire (10 s ahead, checked every 5 s) by 1, 3, 5, 10, 30 then 60 minutes. The client
keeps the handle it received; an ack, a change-invisible or a forward to the DLQ naming that handle is
applied to the latest renewed one. A message held longer than the renew limit (3 h) is given back with
the group's retry delay; the messages of a client that says goodbye (NotifyClientTermination) are given
back in 1 s, so the rest of the group gets them soon.

Like the proxy's, this state is in memory only: after a restart a message comes back once its last
renewed invisible time passes (at most an hour), one attempt later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from tidemq.grpc.settings import GROUP_BACKOFF_S
from tidemq.store.pop import AckStatus, InvalidReceiptHandle, PopLease, PopStore
from tidemq.store.pop_handle import ReceiptHandle

log = logging.getLogger(__name__)

#: ProxyConfig defaults.
RENEW_SLICE_MS = 60_000
RENEW_AHEAD_MS = 10_000
RENEW_PERIOD_MS = 5_000
RENEW_MAX_MS = 3 * 3600 * 1000
CLEAR_INVISIBLE_MS = 1_000
#: RenewStrategyPolicy: the n-th renewal makes the message invisible this long (the last one repeats).
RENEW_STEPS_MS = (60_000, 180_000, 300_000, 600_000, 1_800_000, 3_600_000)


def renew_delay(renewals: int) -> int:
    return RENEW_STEPS_MS[min(max(renewals, 0), len(RENEW_STEPS_MS) - 1)]


def group_retry_delay_ms(attempt: int) -> int:
    """A group's default retry policy's delay after delivery ``attempt`` (CustomizedRetryPolicy: the
    level two past the reconsume times, from 10 s up to the last, 2 h)."""
    return GROUP_BACKOFF_S[min(max(attempt - 1, 0) + 2, len(GROUP_BACKOFF_S) - 1)] * 1000


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class Renewing:
    """One message under renewal: the handle its receiver holds and the latest one."""

    client_id: str
    group: str
    message_id: str
    original: str
    current: str
    attempt: int
    received_at: int
    renewals: int = 0

    def due(self, now: int) -> bool:
        return ReceiptHandle.decode(self.current).next_visible_time - now <= RENEW_AHEAD_MS


class HandleRenewal:
    """The handles of auto-renew receives, by the handle their receiver holds.

    ``retry_delay(attempt)`` is the group's backoff before the next attempt, used to give a message
    back once it has been renewed for ``RENEW_MAX_MS``.
    """

    def __init__(self, pop: PopStore, retry_delay: Callable[[int], int] = group_retry_delay_ms) -> None:
        self.pop = pop
        self.retry_delay = retry_delay
        self._handles: dict[str, Renewing] = {}
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._handles)

    def add(
        self, client_id: str, group: str, message_id: str, handle: str, attempt: int, now: int | None = None
    ) -> None:
        received_at = now_ms() if now is None else now
        self._handles[handle] = Renewing(client_id, group, message_id, handle, handle, attempt, received_at)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="grpc-handle-renewal")

    def take(self, group: str, handle: str) -> str:
        """The handle to act on for a client's ack, nack or forward: the latest renewed one when the
        client's is under renewal (which stops), else the client's own."""
        entry = self._handles.get(handle)
        if entry is None or entry.group != group:
            return handle
        del self._handles[handle]
        return entry.current

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(RENEW_PERIOD_MS / 1000)
            try:
                await self.renew_due(now_ms())
            except Exception:
                log.exception("renewing receipt handles failed")

    async def renew_due(self, now: int) -> None:
        """Renew every handle within ``RENEW_AHEAD_MS`` of expiring; give back those held too long."""
        for entry in [e for e in self._handles.values() if e.due(now)]:
            if self._handles.get(entry.original) is not entry:
                continue  # acked while an earlier renewal was awaited
            if now - entry.received_at >= RENEW_MAX_MS:
                del self._handles[entry.original]
                await self._give_back(entry, self.retry_delay(entry.attempt), now)
                continue
            result, lease = await self._change(entry, renew_delay(entry.renewals), now)
            if lease is None:
                # Expired, acked or superseded meanwhile: the message is no longer this receiver's.
                log.info("stopped renewing %s of %s: %s", entry.message_id, entry.group, result.value)
                self._handles.pop(entry.original, None)
                continue
            entry.current = lease.receipt_handle
            entry.renewals += 1

    async def client_gone(self, client_id: str) -> None:
        """Give the client's messages back to its group in ``CLEAR_INVISIBLE_MS``."""
        now = now_ms()
        for entry in [e for e in self._handles.values() if e.client_id == client_id]:
            del self._handles[entry.original]
            await self._give_back(entry, CLEAR_INVISIBLE_MS, now)

    async def _give_back(self, entry: Renewing, invisible_ms: int, now: int) -> None:
        result, _ = await self._change(entry, invisible_ms, now)
        log.info("gave back %s of %s in %d ms: %s", entry.message_id, entry.group, invisible_ms, result.value)

    async def _change(
        self, entry: Renewing, invisible_ms: int, now: int
    ) -> tuple[AckStatus, PopLease | None]:
        try:
            return await self.pop.change_invisible(entry.group, entry.current, invisible_ms, now)
        except InvalidReceiptHandle:  # only handles this store issued are kept
            return AckStatus.NOT_FOUND, None

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
