"""benchmarks/scale.py climbs a ladder against a real server and prints a row per rung and a plot: two tiny
rungs of the timers and clients ladders (fresh servers, a client child process, timer sends), in seconds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.e2e
def test_two_ladders_print_their_rows_and_plots(tmp_path: Path) -> None:
    args = ["--ladder", "timers,clients", "--rungs", "1,3", "--seconds", "0.5", "--out", str(tmp_path)]
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "scale.py"), *args],
        capture_output=True,
        text=True,
        timeout=240,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
        },
    )
    assert run.returncode == 0, run.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line for line in run.stdout.splitlines() if line.startswith("| ")}
    assert "FAILED" not in run.stdout, run.stdout + run.stderr[-3000:]
    # timers: 1 then 3 pending timers on one server; clients: 1 then 3 connected producers, fresh servers
    assert "3 timers pending" in run.stdout and "3 producers connected, 1 client processes" in run.stdout
    assert rows["1"].split("|")[3].strip() == "1.00"  # the smallest rung is the ratio's base
    for name in ("timers", "clients"):
        assert (tmp_path / f"scale-{name}.png").stat().st_size > 1000
