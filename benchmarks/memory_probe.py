"""How fast this machine gives a process memory it has not touched lately, with no tidemq in the way.

Prints MiB/s per 512 MiB step for (1) buffered ``pwrite`` into a new file, as a broker appends to its
commit log, and (2) a first write to every page of fresh anonymous memory. On a virtual machine whose host
backs guest memory lazily, both fall several-fold once the process has touched a few GiB, and every
process writing new page cache then pays that in system CPU. The backlog rungs of ``scale.py`` write
gigabytes of new page cache, so read them next to this (docs/performance.md, scale ladder).

    python benchmarks/memory_probe.py --gib 8 --dir /tmp
"""

from __future__ import annotations

import argparse
import mmap
import os
import tempfile
import time

STEP = 512 << 20
CHUNK = 1 << 20
PAGE = mmap.PAGESIZE


def file_rates(directory: str, steps: int) -> list[tuple[float, float]]:
    """(MiB/s, CPU share) of each step of buffered 1 MiB pwrites into one new file, deleted after."""
    buf = b"x" * CHUNK
    fd, path = tempfile.mkstemp(prefix="memory-probe-", dir=directory)
    out = []
    try:
        for step in range(steps):
            wall, cpu = time.perf_counter(), time.process_time()
            for i in range(STEP // CHUNK):
                os.pwrite(fd, buf, step * STEP + i * CHUNK)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            out.append((STEP / (1 << 20) / wall, cpu / wall))
    finally:
        os.close(fd)
        os.unlink(path)
    return out


def anonymous_rates(steps: int) -> list[float]:
    """MiB/s of each step's first write to every page of a new anonymous mapping (all kept until the end,
    so each step is memory the process has not had before)."""
    maps: list[mmap.mmap] = []
    out = []
    try:
        for _ in range(steps):
            m = mmap.mmap(-1, STEP)
            maps.append(m)
            wall = time.perf_counter()
            for offset in range(0, STEP, PAGE):
                m[offset] = 1
            out.append(STEP / (1 << 20) / (time.perf_counter() - wall))
    finally:
        for m in maps:
            m.close()
    return out


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--gib", type=int, default=8, help="GiB written by each probe (default 8)")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="folder for the file probe")
    args = parser.parse_args()
    steps = max(1, args.gib * 2)
    files = file_rates(args.dir, steps)
    anonymous = anonymous_rates(steps)
    print("| GiB touched | buffered pwrite MiB/s | its CPU share | anonymous first touch MiB/s |")
    print("|---:|---:|---:|---:|")
    for i, ((rate, share), anon) in enumerate(zip(files, anonymous, strict=True)):
        print(f"| {(i + 1) / 2:g} | {rate:,.0f} | {share:.0%} | {anon:,.0f} |")


if __name__ == "__main__":
    main()
