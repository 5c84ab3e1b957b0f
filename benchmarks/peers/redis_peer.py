"""Redis Streams: ``redis-server`` with an append-only file, redis-py (+ hiredis) clients.

Producer: ``XADD stream * d <body>`` in pipelines of ``spec.batch`` (100; paced runs send single XADDs).
Consumer: one consumer of a group, ``XREADGROUP COUNT 32 BLOCK 100`` with the previous batch's ``XACK``
pipelined in front of it (one round trip per batch).
"""

from __future__ import annotations

import asyncio
import subprocess
from dataclasses import replace
from typing import Any

import redis
from clientlib import Flow, Spec, Tally, pump, ready
from procs import Broker

READ_COUNT = 32
BLOCK_MS = 100


class RedisBroker(Broker):
    system = "redis"

    def __init__(self, fsync: str) -> None:
        super().__init__(f"redis {fsync}")
        self.fsync = fsync
        self.durability = "sync" if fsync == "always" else "async"

    def command(self) -> list[str]:
        return [
            "redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir),
            "--appendonly", "yes", "--appendfsync", self.fsync, "--save", "", "--daemonize", "no",
            "--protected-mode", "no",
        ]  # fmt: skip

    def settings(self) -> str:
        version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()
        v = next((w.split("=")[1] for w in version if w.startswith("v=")), "?")
        return (
            f"{self.label}: redis-server {v}, `--appendonly yes --appendfsync {self.fsync} --save ''`; "
            f"redis-py {redis.__version__} + hiredis; XADD (1 field) in pipelines of 100 (paced: single "
            f"XADD, a pipeline of those due when behind); XREADGROUP COUNT {READ_COUNT} BLOCK {BLOCK_MS} "
            f"with the XACK of the previous batch pipelined in front"
        )

    def ready(self) -> bool:
        return bool(redis.Redis(port=self.port, socket_timeout=1).ping())


def _client(spec: Spec) -> redis.Redis:
    return redis.Redis(host=spec.target["host"], port=spec.target["port"], socket_timeout=30)


def _create_group(r: redis.Redis, stream: str, group: str) -> None:
    try:
        r.xgroup_create(stream, group, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def produce(spec: Spec) -> dict[str, Any]:
    """Blocking redis-py: each pipeline is answered before ``send`` returns (a window of one)."""
    r = _client(spec)
    for group in spec.groups:
        _create_group(r, spec.name, group)
    flow = Flow(1)

    def send(n: int, bodies: list[bytes]) -> None:
        pipe = r.pipeline(transaction=False)
        for body in bodies:
            pipe.xadd(spec.name, {"d": body})
        pipe.execute()
        flow.settle(n)

    return asyncio.run(pump(replace(spec, window=1), send, flow)).result()


def consume(spec: Spec, tally: Tally) -> None:
    r = _client(spec)
    _create_group(r, spec.name, spec.group)
    ack: list[bytes] = []
    ready()
    while not tally.done():
        pipe = r.pipeline(transaction=False)
        if ack:
            pipe.xack(spec.name, spec.group, *ack)
        block = int(tally.remaining(BLOCK_MS / 1000) * 1000)
        pipe.xreadgroup(spec.group, "c1", {spec.name: ">"}, count=READ_COUNT, block=max(1, block))
        answer = pipe.execute()[-1]
        ack = []
        for _stream, entries in answer or []:
            for entry_id, fields in entries:
                tally.record(fields[b"d"])
                ack.append(entry_id)
    if ack:
        r.xack(spec.name, spec.group, *ack)
    tally.finish()
