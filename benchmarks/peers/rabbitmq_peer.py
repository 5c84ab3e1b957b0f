"""RabbitMQ: the Debian ``rabbitmq-server`` run as root as a plain node (own epmd, temp mnesia), pika clients
on pika's asyncio adapter (its asynchronous, callback style: no round trip per message).

Producer: a durable classic queue, persistent messages (delivery_mode 2), publisher confirms with at most
``spec.window`` messages unconfirmed; the broker confirms (often ``multiple``) once a message is on disk.
Consumer: ``basic_consume`` with prefetch 1000, acknowledging with ``multiple=True`` every 100 deliveries
(and whatever is left every 20 ms).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pika
from clientlib import Flow, Spec, Tally, pump, ready
from pika.adapters.asyncio_connection import AsyncioConnection
from pika.channel import Channel
from pika.spec import Basic, BasicProperties
from procs import Broker

from bench_common import free_port

PREFETCH = 1000
ACK_EVERY = 100
ACK_IDLE_S = 0.02
PERSISTENT = BasicProperties(delivery_mode=2)


def _versions() -> str:
    rabbit = next(Path("/usr/lib/rabbitmq/lib").glob("rabbitmq_server-*"), Path("rabbitmq_server-?"))
    otp = next(Path("/usr/lib/erlang/releases").glob("*/OTP_VERSION"), None)
    return f"RabbitMQ {rabbit.name.split('-', 1)[1]} (Erlang/OTP {otp.read_text().strip() if otp else '?'})"


class RabbitBroker(Broker):
    system = "rabbitmq"
    durability = "sync"

    def __init__(self) -> None:
        super().__init__("rabbitmq")
        self.epmd_port = free_port()
        self.dist_port = free_port()
        (self.workdir / "enabled_plugins").write_text("[].\n")
        (self.workdir / "rabbitmq.conf").write_text("")
        (self.workdir / "rabbitmq-env.conf").write_text("")

    def env(self) -> dict[str, str]:
        w = self.workdir
        return {
            **super().env(),
            "HOME": str(w),  # the Erlang cookie lands here
            "ERL_EPMD_PORT": str(self.epmd_port),
            "RABBITMQ_NODENAME": f"bench{self.port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(w / "mnesia"),
            "RABBITMQ_LOG_BASE": str(w / "log"),
            "RABBITMQ_CONFIG_FILE": str(w / "rabbitmq"),
            "RABBITMQ_CONF_ENV_FILE": str(w / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(w / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(w / "rabbitmq.pid"),
        }

    def before_start(self) -> None:
        """Our own epmd in the foreground, so it is a child we can measure and stop by its PID."""
        self.helpers.append(self.spawn(["epmd", "-port", str(self.epmd_port)]))

    def command(self) -> list[str]:
        return ["/usr/lib/rabbitmq/bin/rabbitmq-server"]

    def settings(self) -> str:
        return (
            f"{self.label}: {_versions()}, default config, no plugins; durable classic queue, persistent "
            f"messages, publisher confirms (pika {pika.__version__} asyncio adapter, at most 1000 "
            f"unconfirmed); consumer basic_consume prefetch {PREFETCH}, basic_ack multiple every "
            f"{ACK_EVERY}; broker tree = beam.smp + its children + epmd"
        )

    def ready(self) -> bool:
        params = pika.ConnectionParameters("127.0.0.1", self.port, connection_attempts=1, socket_timeout=2)
        pika.BlockingConnection(params).close()
        return True


async def _open(spec: Spec) -> tuple[AsyncioConnection, Channel]:
    loop = asyncio.get_running_loop()
    opened: asyncio.Future[Channel] = loop.create_future()

    def fail(_conn: Any, error: Any) -> None:
        if not opened.done():
            opened.set_exception(RuntimeError(f"connection failed: {error!r}"))

    def on_channel(channel: Channel) -> None:
        channel.queue_declare(spec.name, durable=True, callback=lambda _frame: opened.set_result(channel))

    params = pika.ConnectionParameters(spec.target["host"], spec.target["port"])
    conn = AsyncioConnection(
        params,
        on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
        on_open_error_callback=fail,
        on_close_callback=fail,
        custom_ioloop=loop,
    )
    return conn, await asyncio.wait_for(opened, 30)


async def _close(conn: AsyncioConnection) -> None:
    if conn.is_open:
        conn.close()
    for _ in range(200):
        if conn.is_closed:
            return
        await asyncio.sleep(0.01)


async def _produce(spec: Spec) -> dict[str, Any]:
    conn, channel = await _open(spec)
    flow = Flow(spec.window)
    unconfirmed: dict[int, None] = {}  # delivery tags in publish order
    next_tag = 0

    def on_confirm(frame: Any) -> None:
        method = frame.method
        error = "nack" if isinstance(method, Basic.Nack) else None
        if method.multiple:
            for tag in list(unconfirmed):
                if tag > method.delivery_tag:
                    break
                del unconfirmed[tag]
                flow.settle(1, error)
        elif unconfirmed.pop(method.delivery_tag, 0) is None:
            flow.settle(1, error)

    confirming: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    channel.confirm_delivery(on_confirm, callback=lambda _frame: confirming.set_result(None))
    await asyncio.wait_for(confirming, 30)

    def send(n: int, bodies: list[bytes]) -> None:
        nonlocal next_tag
        for body in bodies:
            next_tag += 1
            unconfirmed[next_tag] = None
            channel.basic_publish("", spec.name, body, PERSISTENT)

    await pump(spec, send, flow)
    await _close(conn)
    return flow.result()


def produce(spec: Spec) -> dict[str, Any]:
    return asyncio.run(_produce(spec))


async def _consume(spec: Spec, tally: Tally) -> None:
    conn, channel = await _open(spec)
    unacked = 0
    last_tag = 0

    def ack() -> None:
        nonlocal unacked
        if unacked:
            channel.basic_ack(last_tag, multiple=True)
            unacked = 0

    def on_message(_ch: Channel, method: Basic.Deliver, _props: BasicProperties, body: bytes) -> None:
        nonlocal unacked, last_tag
        tally.record(body)
        last_tag = method.delivery_tag
        unacked += 1
        if unacked >= ACK_EVERY:
            ack()

    consuming: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    channel.basic_qos(
        prefetch_count=PREFETCH,
        callback=lambda _f: channel.basic_consume(
            spec.name, on_message, callback=lambda _f: consuming.set_result(None)
        ),
    )
    await asyncio.wait_for(consuming, 30)
    ready()
    while not tally.done():
        await asyncio.sleep(ACK_IDLE_S)
        ack()
    ack()
    tally.finish()
    with contextlib.suppress(Exception):
        await _close(conn)


def consume(spec: Spec, tally: Tally) -> None:
    asyncio.run(_consume(spec, tally))
