"""SIGKILL a process mid-stream of pop receives, acks and invisible-time changes: after recovery no ack
is lost (an acked message never comes again) and no message is lost (a received, unacked one does)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tidemq.store.config import FlushMode
from tidemq.store.pop import InitMode, PopStore
from tidemq.store.pop_log import LOG_NAME, SerialRecord, decode_valid

DRIVER = Path(__file__).with_name("pop_crash_driver.py")
GROUP, TOPIC, MESSAGES = "crash-group", "crash-topic", 5000
FAR_FUTURE = 10**13


@pytest.mark.e2e
@pytest.mark.parametrize("flush_mode", [FlushMode.SYNC, FlushMode.ASYNC])
async def test_a_killed_process_loses_no_ack_and_no_message(tmp_path: Path, flush_mode: FlushMode) -> None:
    proc = subprocess.Popen(
        [sys.executable, str(DRIVER), str(tmp_path), flush_mode.value], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    lines: list[str] = []
    acked = 0
    for line in proc.stdout:
        lines.append(line.strip())
        acked += line.startswith("ACKED")
        if acked >= 1500 or line.startswith("DONE"):
            break
    os.kill(proc.pid, signal.SIGKILL)
    # Read through the file object: communicate(timeout=...) reads the raw pipe and would miss the lines
    # already buffered by the loop above.
    lines += proc.stdout.read().splitlines()
    proc.stdout.close()
    proc.wait(timeout=30)
    assert "DONE" not in lines, "the driver finished before it was killed: the test proves nothing"

    def offsets(word: str) -> set[int]:
        return {int(line.split()[1]) for line in lines if line.startswith(word + " ")}

    leased, acking, acked_ok = offsets("LEASED"), offsets("ACKING"), offsets("ACKED")
    assert len(acked_ok) >= 1500

    store = PopStore(tmp_path)
    records, _ = decode_valid((tmp_path / LOG_NAME).read_bytes())
    assert isinstance(records[0], SerialRecord), "the log was compacted on the way"
    back = store.receive(
        GROUP,
        TOPIC,
        0,
        10 * MESSAGES,
        1000,
        FAR_FUTURE,
        min_offset=0,
        max_offset=MESSAGES,
        init_mode=InitMode.MIN,
    )
    returned = {lease.offset: lease.attempt for lease in back}
    assert len(returned) == len(back)
    assert not acked_ok & returned.keys(), "an acked message came back"
    missing = set(range(MESSAGES)) - returned.keys() - acking
    assert not missing, "a message neither acked nor redelivered"
    for offset in leased - acked_ok:
        if offset not in acking:
            assert returned[offset] >= 2, f"{offset} was received but did not come back as a redelivery"
    await store.close()
