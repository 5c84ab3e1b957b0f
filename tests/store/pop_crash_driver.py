"""Drives a PopStore until killed: the crash test (test_pop_crash.py) SIGKILLs it mid-stream.

Usage: python pop_crash_driver.py DIRECTORY FLUSH_MODE. Prints ``LEASED <offset>`` once a receive has
returned the offset, ``ACKING <offset>`` before an ack is asked and ``ACKED <offset>`` once it returned OK.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from tidemq.store.config import FlushMode
from tidemq.store.pop import AckStatus, InitMode, PopStore

GROUP, TOPIC, MESSAGES, INVISIBLE_MS = "crash-group", "crash-topic", 5000, 600_000


def _now() -> int:
    return int(time.time() * 1000)


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(directory: Path, flush_mode: FlushMode) -> None:
    store = PopStore(directory, flush_mode, flush_interval_ms=20, compact_bytes=16 * 1024)
    await store.start()
    while True:
        leases = store.receive(
            GROUP,
            TOPIC,
            0,
            5,
            INVISIBLE_MS,
            _now(),
            min_offset=0,
            max_offset=MESSAGES,
            init_mode=InitMode.MIN,
        )
        if not leases:
            break
        for lease in leases:
            _say(f"LEASED {lease.offset}")
        for lease in leases:
            if lease.offset % 4 == 0:
                continue  # left in flight: must come back after the crash
            handle = lease.receipt_handle
            if lease.offset % 4 == 1:
                status, renewed = await store.change_invisible(GROUP, handle, INVISIBLE_MS, _now())
                assert status is AckStatus.OK and renewed is not None
                handle = renewed.receipt_handle
            _say(f"ACKING {lease.offset}")
            assert await store.ack(GROUP, handle, _now()) is AckStatus.OK
            _say(f"ACKED {lease.offset}")
        await asyncio.sleep(0)  # let the flush task run, as a server's I/O waits would
    _say("DONE")
    await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), FlushMode(sys.argv[2])))
