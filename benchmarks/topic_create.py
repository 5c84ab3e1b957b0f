"""Topic creation cost as the topic table grows: the topics rung's setup, alone and bounded.

Creates ``--sizes`` topics (4 queues each) one after another against a fresh ``tidemq server --flush
async`` per size, and prints seconds per 1,000 creates at each size; a rate that holds as the size grows
means a create costs the same whatever the table already holds (docs/performance.md, scale ladder).

    python benchmarks/topic_create.py --sizes 1000,3000 --cap 300
"""

from __future__ import annotations

import argparse
import asyncio
import time

from bench_common import Server
from scale_ladders import create_topics


async def timed_creates(server: Server, size: int, cap: float) -> float:
    topics = [f"CreateT{i}" for i in range(size)]
    t0 = time.monotonic()
    await asyncio.wait_for(create_topics(server.namesrv, topics), cap)
    return time.monotonic() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,3000", help="comma separated topic counts")
    parser.add_argument("--cap", type=float, default=300.0, help="seconds allowed per size")
    args = parser.parse_args()
    for size in [int(s) for s in args.sizes.split(",")]:
        server = Server("async")
        server.start()
        try:
            took = asyncio.run(timed_creates(server, size, args.cap))
        finally:
            server.stop()
        print(f"{size:>6} topics: {took:6.1f} s, {took * 1000 / size:5.1f} s per 1,000", flush=True)


if __name__ == "__main__":
    main()
