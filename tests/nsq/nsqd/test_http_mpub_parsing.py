"""``/mpub``'s body is split into messages a slice at a time, yielding to the event loop between slices
(issue 23 finding 2, HTTP half), with nsqd's limits: the text body and the binary one."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable

import pytest

from tidemq.nsq.http import ApiError
from tidemq.nsq.nsqd.http_api import MPUB_SPLIT_STEP, _binary_mpub, _text_mpub
from tidemq.nsq.protocol import MPUB_DECODE_STEP


async def _ticks_during(work: Awaitable[list[bytes]]) -> tuple[list[bytes], int]:
    """What ``work`` returns, and how many times another task ran on the loop meanwhile."""
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    ticks = 0
    bodies = await work
    stop.set()
    await task
    return bodies, ticks


async def test_a_body_of_millions_of_messages_lets_the_loop_run() -> None:
    body = b"x\n" * 2_500_000  # 5 MB: within --max-body-size
    bodies, ticks = await _ticks_during(_text_mpub(body, 1_048_576))
    assert len(bodies) == 2_500_000 and bodies[0] == b"x"
    assert ticks >= len(body) // MPUB_SPLIT_STEP - 1, f"the loop ran {ticks} times during the split"


async def test_a_binary_body_of_a_million_messages_lets_the_loop_run() -> None:
    count = 1_000_000  # 5 MB of one-byte elements: the most --max-body-size allows
    body = struct.pack(">i", count) + (struct.pack(">i", 1) + b"y") * count
    bodies, ticks = await _ticks_during(_binary_mpub(body, 1_048_576, len(body)))
    assert len(bodies) == count and bodies[0] == bodies[-1] == b"y"
    assert ticks >= count // MPUB_DECODE_STEP - 1, f"the loop ran {ticks} times during the decode"


async def test_split_matches_nsqd() -> None:
    assert await _text_mpub(b"a\n\nbb\nccc", 10) == [b"a", b"bb", b"ccc"]
    long_line = b"y" * (MPUB_SPLIT_STEP * 2)
    assert await _text_mpub(b"a\n" + long_line + b"\nz\n", len(long_line)) == [b"a", long_line, b"z"]
    with pytest.raises(ApiError) as err:
        await _text_mpub(b"ok\n" + b"z" * 11, 10)
    assert (err.value.status, err.value.message) == (413, "MSG_TOO_BIG")
