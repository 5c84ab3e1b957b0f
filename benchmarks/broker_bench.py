"""Broker throughput benchmark: a real ``tidemq server`` process driven over loopback.

For each flush mode (async, then sync) a fresh server is started on free 127.0.0.1 ports with a
temporary data directory.  For each body size the workloads are:

* ``send``      single-message SEND_MESSAGE_V2, one request in flight (a synchronous producer);
* ``send x16``  the same with 16 concurrent senders sharing one connection;
* ``batch32``   SEND_BATCH_MESSAGE carrying 32 messages per request;
* ``pull32``    PULL_MESSAGE (maxMsgNums 32) over every queue from offset 0 to the end, decoding
                each response body with ``iter_records`` the way a client does.

Every workload stops at its message budget or its time cap, whichever comes first.  Server CPU is
utime + stime of the server PID read from /proc before and after the workload.

Usage: ``.venv/bin/python benchmarks/broker_bench.py [--quick]``
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bench_common import HOST, MIB, Server, arg_parser, describe, fmt_size, machine, md_row, with_server
from tidemq.record import (
    BatchItem,
    UniqueIdGenerator,
    encode_batch,
    encode_properties,
    iter_records,
)
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.headers import PullMessageRequestHeader, SendMessageRequestHeader
from tidemq.remoting.transport import RemotingConnection, connect

QUEUES = 4
BODY_SIZES = (1024, 100)
FLUSH_MODES = ("async", "sync")
CONCURRENCY = 16
BATCH = 32
PULL_BATCH = 32
REQUEST_TIMEOUT = 10.0


@dataclass(frozen=True)
class Limits:
    """Per-workload budgets: a message count and a wall-time cap (seconds)."""

    send: int
    send_concurrent: int
    batch: int
    pull: int
    seconds: float


FULL = Limits(send=20_000, send_concurrent=20_000, batch=100_000, pull=200_000, seconds=20.0)
QUICK = Limits(send=1_000, send_concurrent=2_000, batch=5_000, pull=20_000, seconds=3.0)


@dataclass
class Result:
    flush: str
    body: int
    workload: str
    messages: int
    seconds: float
    payload_bytes: int
    server_cpu: float
    capped: bool
    error: str | None = None


class BenchError(Exception):
    """The server answered a request with something other than success."""


# --- requests ----------------------------------------------------------------------------------------


class Client:
    """Builds and sends the requests a RocketMQ producer/consumer would, on one connection."""

    def __init__(self, conn: RemotingConnection) -> None:
        self.conn = conn
        self.ids = UniqueIdGenerator(HOST)

    @classmethod
    async def open(cls, port: int) -> Client:
        return cls(await connect(HOST, port))

    def close(self) -> None:
        self.conn.close()

    async def call(self, code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
        request = RemotingCommand(code, ext_fields=ext, body=body, version=409)
        return await self.conn.invoke(request, REQUEST_TIMEOUT)

    @staticmethod
    def check(resp: RemotingCommand, what: str) -> None:
        if resp.code != ResponseCode.SUCCESS:
            raise BenchError(f"{what}: response code {resp.code} remark {resp.remark!r}")

    async def create_topic(self, topic: str) -> None:
        ext = {
            "topic": topic,
            "defaultTopic": "TBW102",
            "readQueueNums": str(QUEUES),
            "writeQueueNums": str(QUEUES),
            "perm": "6",
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": "0",
            "order": "false",
        }
        self.check(await self.call(RequestCode.UPDATE_AND_CREATE_TOPIC, ext), f"create topic {topic}")

    def _send_header(self, topic: str, queue_id: int, properties: str, batch: bool) -> dict[str, str]:
        return SendMessageRequestHeader(
            producer_group="BENCH_PG",
            topic=topic,
            default_topic="TBW102",
            default_topic_queue_nums=QUEUES,
            queue_id=queue_id,
            sys_flag=0,
            born_timestamp=int(time.time() * 1000),
            flag=0,
            properties=properties,
            batch=batch,
        ).to_compact_ext()

    async def send(self, topic: str, queue_id: int, body: bytes) -> None:
        props = encode_properties({"UNIQ_KEY": self.ids.next_id(), "WAIT": "true", "TAGS": "bench"})
        ext = self._send_header(topic, queue_id, props, batch=False)
        self.check(await self.call(RequestCode.SEND_MESSAGE_V2, ext, body), "SEND_MESSAGE_V2")

    async def send_batch(self, topic: str, queue_id: int, bodies: list[bytes]) -> None:
        items = [
            BatchItem(0, b, encode_properties({"UNIQ_KEY": self.ids.next_id(), "TAGS": "bench"}))
            for b in bodies
        ]
        ext = self._send_header(topic, queue_id, encode_properties({"WAIT": "true"}), batch=True)
        resp = await self.call(RequestCode.SEND_BATCH_MESSAGE, ext, encode_batch(items))
        self.check(resp, "SEND_BATCH_MESSAGE")

    async def pull(self, topic: str, queue_id: int, offset: int) -> tuple[int, int, int, int]:
        """Return (messages, payload bytes, next offset, max offset) for one PULL_MESSAGE."""
        ext = PullMessageRequestHeader(
            consumer_group="BENCH_CG",
            topic=topic,
            queue_id=queue_id,
            queue_offset=offset,
            max_msg_nums=PULL_BATCH,
            sys_flag=0x4,  # subscription carried in the request, no suspend, no offset commit
            commit_offset=0,
            suspend_timeout_millis=0,
            sub_version=0,
            subscription="*",
            expression_type="TAG",
        ).to_ext()
        resp = await self.call(RequestCode.PULL_MESSAGE, ext)
        next_offset = int(resp.ext_fields.get("nextBeginOffset", offset))
        max_offset = int(resp.ext_fields.get("maxOffset", offset))
        if resp.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
            return 0, 0, next_offset, max_offset
        self.check(resp, f"PULL_MESSAGE queue {queue_id} offset {offset}")
        count = payload = 0
        for msg in iter_records(resp.body or b""):
            count += 1
            payload += len(msg.body)
        return count, payload, next_offset, max_offset


# --- workloads ---------------------------------------------------------------------------------------


@dataclass
class Progress:
    """What a workload got done before it ran out of budget or time."""

    messages: int = 0
    payload: int = 0
    capped: bool = False


Workload = Callable[[Client, str, bytes, int, float], Awaitable[Progress]]


async def run_send(client: Client, topic: str, body: bytes, budget: int, deadline: float) -> Progress:
    done = Progress()
    while done.messages < budget:
        if time.monotonic() >= deadline:
            done.capped = True
            break
        await client.send(topic, done.messages % QUEUES, body)
        done.messages += 1
        done.payload += len(body)
    return done


async def run_send_concurrent(
    client: Client, topic: str, body: bytes, budget: int, deadline: float
) -> Progress:
    done = Progress()
    issued = 0

    async def sender() -> None:
        nonlocal issued
        while issued < budget:
            if time.monotonic() >= deadline:
                done.capped = True
                return
            seq = issued
            issued += 1
            await client.send(topic, seq % QUEUES, body)
            done.messages += 1
            done.payload += len(body)

    async with asyncio.TaskGroup() as group:  # the first failure cancels the other senders
        for _ in range(CONCURRENCY):
            group.create_task(sender())
    return done


async def run_batch(client: Client, topic: str, body: bytes, budget: int, deadline: float) -> Progress:
    done = Progress()
    request = 0
    while done.messages < budget:
        if time.monotonic() >= deadline:
            done.capped = True
            break
        n = min(BATCH, budget - done.messages)
        await client.send_batch(topic, request % QUEUES, [body] * n)
        request += 1
        done.messages += n
        done.payload += n * len(body)
    return done


async def run_pull(client: Client, topic: str, body: bytes, budget: int, deadline: float) -> Progress:
    del body  # pull reads back whatever the send workloads wrote
    done = Progress()
    for queue_id in range(QUEUES):
        offset = 0
        while done.messages < budget:
            if time.monotonic() >= deadline:
                done.capped = True
                return done
            count, payload, next_offset, max_offset = await client.pull(topic, queue_id, offset)
            done.messages += count
            done.payload += payload
            if count == 0 or next_offset >= max_offset:
                break
            offset = next_offset
    return done


# --- driver ------------------------------------------------------------------------------------------


async def measure(
    server: Server, client: Client, name: str, workload: Workload, topic: str, body: int, budget: int,
    seconds: float,
) -> Result:  # fmt: skip
    payload = os.urandom(body)
    cpu_before = server.cpu_seconds()
    start = time.monotonic()
    error: str | None = None
    try:
        done = await workload(client, topic, payload, budget, start + seconds)
    except Exception as exc:  # reported in the table, the run goes on with the next workload
        done = Progress()
        error = describe(exc)
    elapsed = time.monotonic() - start
    cpu = server.cpu_seconds() - cpu_before if server.alive() else 0.0
    return Result(server.flush, body, name, done.messages, elapsed, done.payload, cpu, done.capped, error)


async def bench_server(server: Server, limits: Limits) -> list[Result]:
    results: list[Result] = []
    client = await Client.open(server.broker_port)
    try:
        for body in BODY_SIZES:
            topic = f"BENCH_{server.flush}_{body}"
            await client.create_topic(topic)
            plan: list[tuple[str, Workload, int]] = [
                ("send", run_send, limits.send),
                (f"send x{CONCURRENCY}", run_send_concurrent, limits.send_concurrent),
                (f"batch{BATCH}", run_batch, limits.batch),
                (f"pull{PULL_BATCH}", run_pull, limits.pull),
            ]
            for name, workload, budget in plan:
                if not server.alive():
                    raise RuntimeError(f"server exited with {server.proc and server.proc.poll()}")
                result = await measure(server, client, name, workload, topic, body, budget, limits.seconds)
                results.append(result)
                print(f"  {result.flush:5} {fmt_size(body):>7} {name:10} {status(result)}", file=sys.stderr)
                if client.conn.is_closed:  # a failed workload may have lost the connection
                    client.close()
                    client = await Client.open(server.broker_port)
    finally:
        client.close()
    return results


def run_mode(flush: str, limits: Limits) -> list[Result]:
    return with_server(Server(flush), lambda server: asyncio.run(bench_server(server, limits)))


# --- report ------------------------------------------------------------------------------------------


def status(r: Result) -> str:
    if r.error:
        return f"FAILED after {r.messages} msgs: {r.error}"
    rate = r.messages / r.seconds if r.seconds > 0 else 0.0
    cap = " (time cap)" if r.capped else ""
    return f"{r.messages} msgs in {r.seconds:.2f} s, {rate:,.0f} msg/s{cap}"


def table(results: list[Result]) -> str:
    lines = [
        "| flush | body | workload | messages | msg/s | MiB/s | server CPU s/100k msgs |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for r in results:
        if r.error:
            lines.append(f"| {r.flush} | {fmt_size(r.body)} | {r.workload} | FAILED: {r.error} | | | |")
            continue
        rate = r.messages / r.seconds if r.seconds > 0 else 0.0
        mib = r.payload_bytes / MIB / r.seconds if r.seconds > 0 else 0.0
        cpu = r.server_cpu / r.messages * 100_000 if r.messages else 0.0
        count = f"{r.messages:,}" + (" (time cap)" if r.capped else "")
        cells = [r.flush, fmt_size(r.body), r.workload, count, f"{rate:,.0f}", f"{mib:.2f}", f"{cpu:.1f}"]
        lines.append(md_row(cells))
    return "\n".join(lines)


def main() -> int:
    parser = arg_parser(__doc__)
    args = parser.parse_args()
    limits = QUICK if args.quick else FULL

    started = time.monotonic()
    results: list[Result] = []
    for flush in FLUSH_MODES:
        results += run_mode(flush, limits)

    print(machine())
    print(
        f"Budgets: send {limits.send:,}, send x{CONCURRENCY} {limits.send_concurrent:,}, "
        f"batch{BATCH} {limits.batch:,}, pull{PULL_BATCH} up to {limits.pull:,} messages; "
        f"time cap {limits.seconds:g} s per workload; {QUEUES} queues per topic; "
        f"client and server share the machine."
    )
    print()
    print(table(results))
    print()
    print(f"Total wall time {time.monotonic() - started:.1f} s")
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
