"""NATS JetStream: ``nats-server -js`` with file storage, nats-py clients.

Producer: ``js.publish_async`` with at most ``spec.window`` publishes unacknowledged (nats-py's own
pending limit set to the same), one stream with file storage per workload.
Consumer: a durable pull consumer (explicit ack), ``fetch(batch)`` and ``msg.ack()`` for each message.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from importlib.metadata import version as dist_version
from typing import Any

import nats
from clientlib import Flow, Spec, Tally, pump, ready
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType
from nats.js.errors import BadRequestError
from procs import Broker, port_open

FETCH = 100
FETCH_TIMEOUT = 0.5


class NatsBroker(Broker):
    system = "nats"
    durability = "async"

    def __init__(self) -> None:
        super().__init__("nats")

    def command(self) -> list[str]:
        return ["nats-server", "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(self.workdir)]

    def settings(self) -> str:
        version = subprocess.run(["nats-server", "--version"], capture_output=True, text=True).stdout.strip()
        return (
            f"{self.label}: {version}, `-js`, one stream per workload with file storage (the server's "
            f"default fsync policy: no fsync per message); nats-py {dist_version('nats-py')}; "
            f"js.publish_async with at most 1000 unacknowledged; durable consumer, explicit ack, msg.ack() "
            f"per message: pull with fetch batches of {FETCH} or push (js.subscribe with a callback)"
        )

    def ready(self) -> bool:
        if not port_open(self.port):
            return False

        async def probe() -> None:
            nc = await nats.connect(f"nats://127.0.0.1:{self.port}", connect_timeout=1, allow_reconnect=False)
            await nc.jetstream().account_info()
            await nc.close()

        asyncio.run(probe())
        return True


async def _connect(spec: Spec) -> Any:
    nc = await nats.connect(f"nats://{spec.target['host']}:{spec.target['port']}", max_reconnect_attempts=3)
    js = nc.jetstream(publish_async_max_pending=max(1, spec.window))
    with contextlib.suppress(BadRequestError):  # exists already (the other side created it)
        await js.add_stream(name=spec.name, subjects=[spec.name], storage=StorageType.FILE)
    return nc, js


async def _produce(spec: Spec) -> dict[str, Any]:
    nc, js = await _connect(spec)
    flow = Flow(spec.window)

    async def send(n: int, bodies: list[bytes]) -> None:
        future = await js.publish_async(spec.name, bodies[0])
        future.add_done_callback(flow.settle_future(n))

    await pump(spec, send, flow)
    await nc.close()
    return flow.result()


def produce(spec: Spec) -> dict[str, Any]:
    return asyncio.run(_produce(spec))


async def _consume(spec: Spec, tally: Tally) -> None:
    nc, js = await _connect(spec)
    config = ConsumerConfig(
        durable_name=spec.group, ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
        max_ack_pending=20_000,
    )  # fmt: skip
    if spec.variant == "push":

        async def on_message(msg: Any) -> None:
            tally.record(msg.data)
            await msg.ack()

        await js.subscribe(
            spec.name, durable=spec.group, stream=spec.name, config=config, cb=on_message, manual_ack=True,
            pending_msgs_limit=100_000,
        )  # fmt: skip
        ready()
        await tally.wait()
    else:
        sub = await js.pull_subscribe(spec.name, durable=spec.group, stream=spec.name, config=config)
        ready()
        while not tally.done():
            try:
                msgs = await sub.fetch(FETCH, timeout=tally.remaining(FETCH_TIMEOUT))
            except TimeoutError:
                continue
            for msg in msgs:
                tally.record(msg.data)
                await msg.ack()
    await nc.flush()
    tally.finish()
    await nc.close()


def consume(spec: Spec, tally: Tally) -> None:
    asyncio.run(_consume(spec, tally))
