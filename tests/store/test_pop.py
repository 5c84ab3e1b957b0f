"""The pop state: receive, ack, invisible-time changes, redelivery, FIFO, restart and compaction."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tidemq.store.config import FlushMode, StoreConfig
from tidemq.store.pop import AckStatus, InitMode, InvalidReceiptHandle, PopStore, ReceiptHandle
from tidemq.store.pop_log import LOG_NAME

G, T = "g", "t"
MIN = InitMode.MIN


def _receive(
    store: PopStore,
    n: int,
    now: int,
    *,
    max_offset: int = 100,
    fifo: bool = False,
    init_mode: InitMode = InitMode.MAX,
) -> list[tuple[int, int]]:
    leases = store.receive(
        G, T, 0, n, 1000, now, min_offset=0, max_offset=max_offset, fifo=fifo, init_mode=init_mode
    )
    return [(lease.offset, lease.attempt) for lease in leases]


async def test_received_messages_are_invisible_until_their_time_then_come_again_one_attempt_later(
    tmp_path: Path,
) -> None:
    store = PopStore(tmp_path)
    assert _receive(store, 3, 0, init_mode=InitMode.MIN) == [(0, 1), (1, 1), (2, 1)]
    assert _receive(store, 2, 999) == [(3, 1), (4, 1)]
    assert _receive(store, 2, 1000) == [(0, 2), (1, 2)]
    assert store.next_visible_at(G, T, 0) == 1000
    assert _receive(store, 10, 1001, max_offset=6) == [(2, 2), (5, 1)]
    assert store.inflight_count(G, T, 0) == 6
    await store.close()


async def test_a_new_group_starts_at_the_last_message_as_the_proxy_does(tmp_path: Path) -> None:
    store = PopStore(tmp_path)
    assert _receive(store, 5, 0, max_offset=10) == [(9, 1)]
    assert store.committed_offset(G, T, 0) == 9
    # A hot queue (offset 0 still in memory) is read from its start.
    leases = store.receive("g2", T, 0, 2, 1000, 0, min_offset=0, max_offset=10, first_in_memory=True)
    assert [lease.offset for lease in leases] == [0, 1]
    # An empty queue: the first message to come.
    assert store.receive("g3", T, 1, 5, 1000, 0, min_offset=0, max_offset=0) == []
    assert [x.offset for x in store.receive("g3", T, 1, 5, 1000, 0, min_offset=0, max_offset=1)] == [0]
    await store.close()


async def test_ack_is_final_and_the_committed_offset_moves_only_past_acked_messages(tmp_path: Path) -> None:
    store = PopStore(tmp_path)
    leases = store.receive(G, T, 0, 3, 1000, 0, min_offset=0, max_offset=3, init_mode=InitMode.MIN)
    assert await store.ack(G, leases[1].receipt_handle, 10) is AckStatus.OK
    assert store.committed_offset(G, T, 0) == 0
    assert await store.ack(G, leases[0].receipt_handle, 10) is AckStatus.OK
    assert store.committed_offset(G, T, 0) == 2
    assert await store.ack(G, leases[0].receipt_handle, 10) is AckStatus.ALREADY_ACKED
    assert _receive(store, 5, 5000, max_offset=3) == [(2, 2)]
    await store.close()


async def test_stale_expired_and_forged_handles_are_refused(tmp_path: Path) -> None:
    store = PopStore(tmp_path)
    [first] = store.receive(G, T, 0, 1, 1000, 0, min_offset=0, max_offset=1, init_mode=InitMode.MIN)
    assert await store.ack(G, first.receipt_handle, 1000) is AckStatus.EXPIRED
    [again] = store.receive(G, T, 0, 1, 5000, 1000, min_offset=0, max_offset=1)
    assert again.attempt == 2
    # The first handle's time is gone; a handle of the same delivery with a later time is superseded.
    old = ReceiptHandle.decode(first.receipt_handle)
    renewed = ReceiptHandle(old.start_offset, 900, 5000, old.serial, 0, 0, T).encode()
    assert await store.ack(G, renewed, 1001) is AckStatus.SUPERSEDED
    never = ReceiptHandle(0, 900, 5000, 1, 0, 7, T).encode()
    assert await store.ack(G, never, 1001) is AckStatus.NOT_FOUND
    assert await store.ack("other", again.receipt_handle, 1001) is AckStatus.NOT_FOUND
    with pytest.raises(InvalidReceiptHandle):
        await store.ack(G, "not a handle", 1001)
    with pytest.raises(InvalidReceiptHandle):
        ReceiptHandle.decode("1 2 3 4 5 -6 t")
    assert await store.ack(G, again.receipt_handle, 1001) is AckStatus.OK
    await store.close()


async def test_change_invisible_issues_a_new_handle_and_the_old_one_goes_stale(tmp_path: Path) -> None:
    store = PopStore(tmp_path)
    [lease] = store.receive(G, T, 0, 1, 1000, 0, min_offset=0, max_offset=1, init_mode=InitMode.MIN)
    status, renewed = await store.change_invisible(G, lease.receipt_handle, 5000, 500)
    assert status is AckStatus.OK and renewed is not None
    assert (renewed.offset, renewed.attempt, renewed.visible_at) == (0, 1, 5500)
    assert _receive(store, 1, 2000, max_offset=1) == []  # not visible at the old time
    assert await store.ack(G, lease.receipt_handle, 600) is AckStatus.SUPERSEDED
    # A nack with no backoff: visible at once, one attempt later.
    status, now_visible = await store.change_invisible(G, renewed.receipt_handle, 0, 700)
    assert status is AckStatus.OK and now_visible is not None
    assert _receive(store, 1, 700, max_offset=1) == [(0, 2)]
    await store.close()


async def test_fifo_hands_a_queue_to_one_receiver_at_a_time_in_order(tmp_path: Path) -> None:
    store = PopStore(tmp_path)
    first = store.receive(G, T, 0, 2, 1000, 0, min_offset=0, max_offset=5, fifo=True, init_mode=InitMode.MIN)
    assert [x.offset for x in first] == [0, 1]
    assert _receive(store, 2, 10, max_offset=5, fifo=True) == []
    assert await store.ack(G, first[0].receipt_handle, 20) is AckStatus.OK
    assert _receive(store, 2, 30, max_offset=5, fifo=True) == []  # 1 is still in flight
    # Its invisible time passes: it comes again, in order, before anything new.
    assert _receive(store, 3, 1000, max_offset=5, fifo=True) == [(1, 2), (2, 1), (3, 1)]
    await store.close()


async def test_groups_and_queues_are_independent(tmp_path: Path) -> None:
    store = PopStore(tmp_path)
    a = store.receive("a", T, 0, 2, 1000, 0, min_offset=0, max_offset=2, init_mode=InitMode.MIN)
    b = store.receive("b", T, 0, 2, 1000, 0, min_offset=0, max_offset=2, init_mode=InitMode.MIN)
    assert [x.offset for x in a] == [x.offset for x in b] == [0, 1]
    assert await store.ack("a", a[0].receipt_handle, 1) is AckStatus.OK
    assert store.committed_offset("a", T, 0) == 1 and store.committed_offset("b", T, 0) == 0
    assert store.committed_offset("a", T, 1) == -1
    await store.close()


async def test_a_filter_passes_over_messages_for_good(tmp_path: Path) -> None:
    store = PopStore(tmp_path)
    leases = store.receive(
        G, T, 0, 3, 1000, 0, min_offset=0, max_offset=10, init_mode=InitMode.MIN, accept=lambda o: o % 3 == 0
    )
    assert [x.offset for x in leases] == [0, 3, 6]
    for lease in leases:
        assert await store.ack(G, lease.receipt_handle, 1) is AckStatus.OK
    assert store.committed_offset(G, T, 0) == 7
    await store.close()
    reopened = PopStore(tmp_path)
    assert reopened.committed_offset(G, T, 0) == 7
    await reopened.close()


async def test_messages_deleted_by_retention_leave_the_state(tmp_path: Path) -> None:
    store = PopStore(tmp_path)
    store.receive(G, T, 0, 3, 1000, 0, min_offset=0, max_offset=3, init_mode=InitMode.MIN)
    assert [x.offset for x in store.receive(G, T, 0, 5, 1000, 2000, min_offset=2, max_offset=4)] == [2, 3]
    assert store.committed_offset(G, T, 0) == 2
    await store.close()


async def test_the_state_survives_a_restart_with_its_handles(tmp_path: Path) -> None:
    store = PopStore(tmp_path, flush_mode=FlushMode.SYNC)
    leases = store.receive(G, T, 0, 3, 1000, 0, min_offset=0, max_offset=3, init_mode=InitMode.MIN)
    assert await store.ack(G, leases[0].receipt_handle, 1) is AckStatus.OK
    store._log.close()  # no flush, no compaction: what a killed process leaves

    reopened = PopStore(tmp_path)
    assert reopened.committed_offset(G, T, 0) == 1
    assert await reopened.ack(G, leases[1].receipt_handle, 2) is AckStatus.OK
    assert await reopened.ack(G, leases[0].receipt_handle, 2) is AckStatus.ALREADY_ACKED
    assert _receive(reopened, 5, 2000, max_offset=3) == [(2, 2)]
    await reopened.close()


async def test_a_torn_tail_is_cut_off(tmp_path: Path) -> None:
    store = PopStore(tmp_path)
    store.receive(G, T, 0, 2, 1000, 0, min_offset=0, max_offset=2, init_mode=InitMode.MIN)
    await store.close()
    with open(tmp_path / LOG_NAME, "ab") as out:
        out.write(b"\x00\x01\x02")
    reopened = PopStore(tmp_path)
    assert reopened.inflight_count(G, T, 0) == 2
    assert _receive(reopened, 5, 0, max_offset=3) == [(2, 1)]
    await reopened.close()
    assert PopStore(tmp_path).inflight_count(G, T, 0) == 3


async def test_compaction_keeps_only_what_is_in_flight(tmp_path: Path) -> None:
    store = PopStore(tmp_path, compact_bytes=4096)
    for round_ in range(50):
        leases = store.receive(G, T, 0, 20, 1000, round_, min_offset=0, max_offset=9999, init_mode=MIN)
        for lease in leases[1:]:
            assert await store.ack(G, lease.receipt_handle, round_) is AckStatus.OK
    grown = (tmp_path / LOG_NAME).stat().st_size
    await store.flush()
    compacted = (tmp_path / LOG_NAME).stat().st_size
    assert compacted < grown / 10
    await store.close()
    reopened = PopStore(tmp_path)
    assert reopened.inflight_count(G, T, 0) == 50
    assert reopened.committed_offset(G, T, 0) == 0
    # Serials keep growing after a compaction: a fresh delivery never reuses an old handle's serial.
    [lease] = reopened.receive(G, T, 0, 1, 1000, 10, min_offset=0, max_offset=1001)
    assert ReceiptHandle.decode(lease.receipt_handle).serial > 50 * 20
    await reopened.close()


async def test_sync_flush_acks_after_an_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    store = PopStore.for_store(StoreConfig(tmp_path, flush_mode=FlushMode.SYNC))
    [lease] = store.receive(G, T, 0, 1, 1000, 0, min_offset=0, max_offset=1, init_mode=InitMode.MIN)
    assert not synced
    assert await store.ack(G, lease.receipt_handle, 1) is AckStatus.OK
    assert synced
    await store.close()
    assert (tmp_path / "pop" / LOG_NAME).exists()
