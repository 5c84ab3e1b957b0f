"""tidemq's NSQ side: ``tidemq nsqd --flush async|sync`` (``nsq_workloads.Nsqd``), driven by tidemq's own
asyncio NSQ client or by pynsq (tornado, here on the same asyncio loop), chosen by ``spec.options``.

Producers: PUB pipelined (``spec.batch`` 1) or MPUB of ``spec.batch`` bodies, at most ``spec.window``
commands unanswered.  Consumers: one connection with ``max_in_flight``, a no-op handler, FIN on return.
W2's backlog is held by channels created (``/channel/create``) before W1 publishes.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from clientlib import Flow, Spec, Tally, pump, ready
from tidemq_peer import TidemqBroker

from bench_common import Server, wait_until
from nsq_workloads import Nsqd
from tidemq.nsq.client import Consumer, Message, Producer

CONNECT_TIMEOUT = 10.0
MAX_IN_FLIGHT = 1000


class NsqBroker(TidemqBroker):
    system = "tidemq-nsq"

    def __init__(self, flush: str) -> None:
        super().__init__(flush)
        self.label = f"tidemq-nsq {flush}"

    def make_server(self, flush: str) -> Server:
        return Nsqd(flush)

    def target(self) -> dict[str, Any]:
        server = self.server
        assert isinstance(server, Nsqd)
        return {"tcp": server.tcp, "http": f"127.0.0.1:{server.http_port}"}

    def settings(self) -> str:
        return (
            f"{self.label}: `tidemq nsqd --flush {self.server.flush}`; clients: tidemq.nsq.client "
            f"(Producer.publish_async / multi_publish_async, Consumer) or pynsq (nsq.Writer pub/mpub, "
            f"nsq.Reader); PUB pipelined or MPUB x100 (see variant); consumer max_in_flight "
            f"{MAX_IN_FLIGHT}, no-op handler, FIN on return; W2 drains a channel created before W1"
        )


def _create_channels(spec: Spec) -> None:
    def post(path: str, **query: str) -> None:
        url = f"http://{spec.target['http']}/{path}?{urllib.parse.urlencode(query)}"
        with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=10) as resp:
            resp.read()

    post("topic/create", topic=spec.name)
    for channel in spec.groups:
        post("channel/create", topic=spec.name, channel=channel)


async def _until(predicate: Callable[[], object], what: str) -> None:
    if not await wait_until(predicate, CONNECT_TIMEOUT):
        raise RuntimeError(f"{what} not connected after {CONNECT_TIMEOUT:.0f} s")


# --- tidemq's client ---------------------------------------------------------------------------------------


async def _produce_tidemq(spec: Spec, flow: Flow) -> None:
    async with Producer(spec.target["tcp"]) as producer:
        await producer.ping()

        def send(n: int, bodies: list[bytes]) -> None:
            if n > 1:
                future = producer.multi_publish_async(spec.name, bodies)
            else:
                future = producer.publish_async(spec.name, bodies[0])
            future.add_done_callback(flow.settle_future(n))

        await pump(spec, send, flow)


async def _consume_tidemq(spec: Spec, tally: Tally) -> None:
    consumer = Consumer(spec.name, spec.group, max_in_flight=MAX_IN_FLIGHT)

    async def handle(message: Message) -> None:
        tally.record(message.body)

    consumer.add_handler(handle)
    await consumer.connect_to_nsqd(spec.target["tcp"])
    await asyncio.sleep(0.2)  # RDY reaches nsqd
    ready()
    await tally.wait()
    tally.finish()
    await asyncio.wait_for(consumer.stop(), 20)


# --- pynsq -------------------------------------------------------------------------------------------------


async def _produce_pynsq(spec: Spec, flow: Flow) -> None:
    import nsq

    writer = nsq.Writer(nsqd_tcp_addresses=[spec.target["tcp"]])
    await _until(lambda: writer.conns, "pynsq Writer")

    def send(n: int, bodies: list[bytes]) -> None:
        def answered(_conn: Any, data: Any) -> None:
            flow.settle(n, data if isinstance(data, Exception) else None)

        if n > 1:
            writer.mpub(spec.name, bodies, callback=answered)
        else:
            writer.pub(spec.name, bodies[0], callback=answered)

    await pump(spec, send, flow)
    for conn in list(writer.conns.values()):
        conn.close()


async def _consume_pynsq(spec: Spec, tally: Tally) -> None:
    import nsq

    def handle(message: Any) -> bool:
        tally.record(bytes(message.body))
        return True

    reader = nsq.Reader(
        topic=spec.name, channel=spec.group, message_handler=handle,
        nsqd_tcp_addresses=[spec.target["tcp"]], max_in_flight=MAX_IN_FLIGHT,
    )  # fmt: skip
    await _until(lambda: reader.conns, "pynsq Reader")
    await asyncio.sleep(0.2)
    ready()
    await tally.wait()
    tally.finish()
    await asyncio.sleep(0.05)  # the last FINs leave the socket
    reader.close()


# --- entry points ------------------------------------------------------------------------------------------


def produce(spec: Spec) -> dict[str, Any]:
    logging.getLogger("nsq").setLevel(logging.ERROR)
    _create_channels(spec)
    flow = Flow(spec.window)
    run = _produce_pynsq if spec.options.get("client") == "pynsq" else _produce_tidemq
    asyncio.run(run(spec, flow))
    return flow.result()


def consume(spec: Spec, tally: Tally) -> None:
    logging.getLogger("nsq").setLevel(logging.ERROR)
    run = _consume_pynsq if spec.options.get("client") == "pynsq" else _consume_tidemq
    asyncio.run(run(spec, tally))
