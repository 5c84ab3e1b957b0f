"""Auto-renewed receipt handles (grpc/renewal.py) over a real pop state in a temporary directory."""

from __future__ import annotations

import time
from pathlib import Path

from tidemq.grpc.renewal import (
    CLEAR_INVISIBLE_MS,
    RENEW_AHEAD_MS,
    RENEW_MAX_MS,
    RENEW_SLICE_MS,
    HandleRenewal,
    group_retry_delay_ms,
    renew_delay,
)
from tidemq.store.pop import AckStatus, InitMode, PopStore

G, T = "g", "t"


def lease(pop: PopStore, now: int, offsets: int = 1) -> list[str]:
    leases = pop.receive(
        G, T, 0, offsets, RENEW_SLICE_MS, now, min_offset=0, max_offset=offsets, init_mode=InitMode.MIN
    )
    return [x.receipt_handle for x in leases]


def test_renew_steps_and_the_groups_retry_delay() -> None:
    assert [renew_delay(n) for n in range(8)] == [
        60_000, 180_000, 300_000, 600_000, 1_800_000, 3_600_000, 3_600_000, 3_600_000
    ]  # fmt: skip
    assert [group_retry_delay_ms(a) for a in (1, 2, 3, 16, 40)] == [
        10_000,
        30_000,
        60_000,
        7_200_000,
        7_200_000,
    ]


async def test_a_handle_is_renewed_before_it_expires_and_an_ack_by_the_original_lands(tmp_path: Path) -> None:
    pop = PopStore(tmp_path)
    renewal = HandleRenewal(pop)
    try:
        now = int(time.time() * 1000)
        (original,) = lease(pop, now)
        renewal.add("c1", G, "m1", original, 1, now)
        await renewal.renew_due(now + 1_000)  # 59 s left: not due
        assert pop.next_visible_at(G, T, 0) == now + RENEW_SLICE_MS
        due = now + RENEW_SLICE_MS - RENEW_AHEAD_MS + 1
        await renewal.renew_due(due)
        assert pop.next_visible_at(G, T, 0) == due + renew_delay(0)
        await renewal.renew_due(due + renew_delay(0) - RENEW_AHEAD_MS)
        assert pop.next_visible_at(G, T, 0) == due + renew_delay(0) - RENEW_AHEAD_MS + renew_delay(1)
        later = due + 70_000  # the original handle expired long ago
        current = renewal.take(G, original)
        assert current != original and len(renewal) == 0
        assert await pop.ack(G, original, later) is AckStatus.EXPIRED  # without the renewal map
        assert await pop.ack(G, current, later) is AckStatus.OK
        assert renewal.take(G, original) == original  # no longer renewed: acted on as given
    finally:
        await renewal.close()
        await pop.close()


async def test_held_too_long_or_client_gone_gives_the_message_back(tmp_path: Path) -> None:
    pop = PopStore(tmp_path)
    renewal = HandleRenewal(pop)
    try:
        now = int(time.time() * 1000)
        first, second = lease(pop, now, 2)
        renewal.add("c1", G, "m1", first, 3, now - RENEW_MAX_MS)
        renewal.add("c2", G, "m2", second, 1, now)
        at = now + RENEW_SLICE_MS - RENEW_AHEAD_MS
        await renewal.renew_due(at)
        assert len(renewal) == 1  # m1 stopped renewing, back after attempt 3's retry delay (60 s)
        assert renewal.take(G, first) == first
        await renewal.client_gone("c2")
        assert len(renewal) == 0
        assert pop.next_visible_at(G, T, 0) is not None
        back = pop.receive(G, T, 0, 8, 300_000, at + CLEAR_INVISIBLE_MS, min_offset=0, max_offset=2)
        assert [(x.offset, x.attempt) for x in back] == [(1, 2)]
        back = pop.receive(G, T, 0, 8, 300_000, at + group_retry_delay_ms(3), min_offset=0, max_offset=2)
        assert [(x.offset, x.attempt) for x in back] == [(0, 2)]
    finally:
        await renewal.close()
        await pop.close()
