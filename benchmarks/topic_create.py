"""Topic creation and deletion cost as the topic table grows: the topics rung's setup, alone and bounded.

Creates ``--sizes`` topics (4 queues each, 4 requests at a time as the topics rung does) against a fresh
``tidemq server --flush async`` per size, then deletes them from the broker (DELETE_TOPIC_IN_BROKER), and
prints seconds per 1,000 of each at each size; a rate that holds as the size grows means one create or
delete costs the same whatever the table already holds (docs/performance.md, scale ladder).

    python benchmarks/topic_create.py --sizes 1000,3000 --cap 300
"""

from __future__ import annotations

import argparse
import asyncio
import time

from bench_common import Server
from scale_ladders import CREATE_CONCURRENCY, CREATE_TIMEOUT, bounded, create_topics
from tidemq.client.admin import Admin
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand


async def delete_topics(namesrv: str, topics: list[str]) -> None:
    async with Admin(namesrv) as admin:
        conns = [await admin.instance.connection(a) for a in (await admin.cluster_masters()).values()]

        async def delete(topic: str) -> None:
            for conn in conns:
                request = RemotingCommand(RequestCode.DELETE_TOPIC_IN_BROKER, ext_fields={"topic": topic})
                answer = await conn.invoke(request, CREATE_TIMEOUT)
                if answer.code != ResponseCode.SUCCESS:
                    raise RuntimeError(f"delete {topic}: {answer.code} {answer.remark}")

        await bounded(topics, delete, CREATE_CONCURRENCY)


async def timed(server: Server, size: int, cap: float) -> tuple[float, float]:
    """Seconds to create ``size`` topics, then to delete them."""
    topics = [f"CreateT{i}" for i in range(size)]
    t0 = time.monotonic()
    await asyncio.wait_for(create_topics(server.namesrv, topics), cap)
    t1 = time.monotonic()
    await asyncio.wait_for(delete_topics(server.namesrv, topics), cap)
    return t1 - t0, time.monotonic() - t1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,3000", help="comma separated topic counts")
    parser.add_argument("--cap", type=float, default=300.0, help="seconds allowed per size")
    args = parser.parse_args()
    for size in [int(s) for s in args.sizes.split(",")]:
        server = Server("async")
        server.start()
        try:
            created, deleted = asyncio.run(timed(server, size, args.cap))
        finally:
            server.stop()
        print(
            f"{size:>6} topics: created in {created:6.1f} s ({created * 1000 / size:5.1f} s per 1,000),"
            f" deleted in {deleted:6.1f} s ({deleted * 1000 / size:5.1f} s per 1,000)",
            flush=True,
        )


if __name__ == "__main__":
    main()
