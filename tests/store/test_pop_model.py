"""The pop state against a reference model under random receive/ack/change/clock/restart sequences."""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.store.pop import AckStatus, InitMode, PopStore

G, T, MAX_OFFSET = "g", "t", 12


@dataclass
class Delivery:
    handle: str
    visible_at: int
    attempt: int


class Model:
    """Each offset is new, in flight (under its latest handle) or acked; nothing else."""

    def __init__(self) -> None:
        self.position = 0
        self.inflight: dict[int, Delivery] = {}
        self.acked: set[int] = set()
        #: Every handle ever issued -> its offset and its expiry.
        self.handles: dict[str, tuple[int, int]] = {}

    def visible_again(self, now: int, fifo: bool) -> list[int]:
        if fifo:
            return sorted(self.inflight)
        due = [(d.visible_at, o) for o, d in self.inflight.items() if d.visible_at <= now]
        return [o for _, o in sorted(due)]

    def expect_status(self, handle: str, now: int) -> AckStatus:
        offset, expires = self.handles[handle]
        if expires <= now:
            return AckStatus.EXPIRED
        if offset in self.acked:
            return AckStatus.ALREADY_ACKED
        if self.inflight[offset].handle != handle:
            return AckStatus.SUPERSEDED
        return AckStatus.OK


ops = st.lists(
    st.one_of(
        st.tuples(st.just("receive"), st.integers(1, 4), st.integers(0, 3000), st.booleans()),
        st.tuples(st.just("ack"), st.integers(0, 1000)),
        st.tuples(st.just("change"), st.integers(0, 1000), st.integers(0, 3000)),
        st.tuples(st.just("clock"), st.integers(1, 2500)),
        st.tuples(st.just("restart"), st.booleans()),
    ),
    max_size=40,
)


async def _run(directory: Path, steps: list[tuple[object, ...]]) -> None:
    store = PopStore(directory, compact_bytes=256)
    model, now, created = Model(), 1_000_000, False
    for step in steps:
        kind = step[0]
        if kind == "receive":
            n, invisible, fifo = int(step[1]), int(step[2]), bool(step[3])  # type: ignore[call-overload]
            blocked = fifo and any(d.visible_at > now for d in model.inflight.values())
            expected = (
                []
                if blocked
                else [(o, model.inflight[o].attempt + 1) for o in model.visible_again(now, fifo)]
            )
            expected = expected[:n]
            while not blocked and len(expected) < n and model.position < MAX_OFFSET:
                expected.append((model.position, 1))
                model.position += 1
            leases = store.receive(
                G,
                T,
                0,
                n,
                invisible,
                now,
                min_offset=0,
                max_offset=MAX_OFFSET,
                fifo=fifo,
                init_mode=InitMode.MIN,
            )
            assert [(x.offset, x.attempt) for x in leases] == expected
            created = True
            for lease in leases:
                assert lease.visible_at == now + invisible
                model.inflight[lease.offset] = Delivery(lease.receipt_handle, now + invisible, lease.attempt)
                model.handles[lease.receipt_handle] = (lease.offset, now + invisible)
        elif kind in ("ack", "change") and model.handles:
            handles = sorted(model.handles)
            handle = handles[int(step[1]) % len(handles)]  # type: ignore[call-overload]
            expected_status = model.expect_status(handle, now)
            offset = model.handles[handle][0]
            if kind == "ack":
                assert await store.ack(G, handle, now) is expected_status
                if expected_status is AckStatus.OK:
                    del model.inflight[offset]
                    model.acked.add(offset)
            else:
                invisible = int(step[2])  # type: ignore[call-overload]
                status, lease = await store.change_invisible(G, handle, invisible, now)
                assert status is expected_status
                if status is AckStatus.OK:
                    assert lease is not None and lease.attempt == model.inflight[offset].attempt
                    model.inflight[offset] = Delivery(lease.receipt_handle, now + invisible, lease.attempt)
                    model.handles[lease.receipt_handle] = (offset, now + invisible)
        elif kind == "clock":
            now += int(step[1])  # type: ignore[call-overload]
        elif kind == "restart":
            if step[1]:
                await store.close()
            else:
                store._log.close()  # what a killed process leaves: no flush, no compaction
            store = PopStore(directory, compact_bytes=256)
        # The invariants after every step.
        assert store.inflight_count(G, T, 0) == len(model.inflight)
        committed = min(model.inflight, default=model.position)
        assert store.committed_offset(G, T, 0) == (committed if created else -1)
    await store.close()


@settings(max_examples=150, deadline=None)
@given(ops)
def test_pop_state_matches_the_reference_model(steps: list[tuple[object, ...]]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(_run(Path(directory), steps))
