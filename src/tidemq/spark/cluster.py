"""What the driver asks the cluster: queues of topics, their offset bounds, and consumer-offset commits.

Spark calls the driver side from short-lived planner processes (one question each) and from a long-lived
stream-runner process that asks for the latest offsets every few milliseconds while a stream is idle; a
``Cluster`` keeps its connections and an event loop for the latter. It is never pickled.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from tidemq.client import api
from tidemq.client.config import ClientConfig
from tidemq.client.instance import ClientInstance, MQClientError
from tidemq.remoting.names import AUTO_CREATE_TOPIC_KEY
from tidemq.remoting.route import MASTER_ID
from tidemq.remoting.transport import RemotingError
from tidemq.spark.offsets import QueueRef, QueueState, Snapshot
from tidemq.spark.options import OptionError

T = TypeVar("T")

#: How long a topic's queue list is trusted before the name server is asked again (clients use 30 s).
ROUTE_TTL_S = 10.0


class BrokerUnavailableError(RuntimeError):
    """A broker named in a topic's route could not be asked; the message says which and why."""


class Cluster:
    """Connections to a name server and the brokers it names, with their own event loop."""

    def __init__(self, namesrv: str, credentials: tuple[str, str] | None = None) -> None:
        self.namesrv = namesrv
        self.credentials = credentials
        self._loop: asyncio.AbstractEventLoop | None = None
        self._instance: ClientInstance | None = None
        self._queues: dict[str, tuple[float, dict[QueueRef, str]]] = {}

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._loop is not None:
            if self._instance is not None:
                self._loop.run_until_complete(self._instance.close())
            self._loop.close()
        self._loop = self._instance = None

    def _run(self, job: Callable[[ClientInstance], Awaitable[T]]) -> T:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()

        async def call() -> T:
            if self._instance is None:
                config = ClientConfig(
                    namesrv_addr=self.namesrv,
                    instance_name=f"spark-{os.getpid()}",
                    credentials=self.credentials,
                )
                self._instance = ClientInstance(config)
            try:
                return await job(self._instance)
            except MQClientError as exc:
                raise OptionError(f"namesrv: cannot use the name server at {self.namesrv}: {exc}") from None

        return self._loop.run_until_complete(call())

    async def _route_queues(self, instance: ClientInstance, topic: str) -> dict[QueueRef, str]:
        cached = self._queues.get(topic)
        if cached is not None and time.monotonic() - cached[0] < ROUTE_TTL_S:
            return cached[1]
        route = await instance.update_route(topic)
        if route is None:
            raise OptionError(
                f"topic: topic {topic!r} does not exist (the name server at {self.namesrv} has no route)"
            )
        out: dict[QueueRef, str] = {}
        for mq in route.subscribe_queues(topic):
            broker = route.brokers.get(mq.broker_name)
            if broker is None or not broker.addrs:
                continue
            addr = broker.addrs.get(MASTER_ID) or broker.addrs[min(broker.addrs)]
            out[QueueRef(topic, mq.broker_name, mq.queue_id)] = addr
        self._queues[topic] = (time.monotonic(), out)
        return out

    @staticmethod
    async def _bounds(instance: ClientInstance, ref: QueueRef, addr: str, want_min: bool) -> QueueState:
        try:
            conn = await instance.connection(addr)
            high = await api.get_max_offset(conn, ref.topic, ref.queue_id)
            low = await api.get_min_offset(conn, ref.topic, ref.queue_id) if want_min else 0
        except (RemotingError, api.BrokerError) as exc:
            raise BrokerUnavailableError(
                f"broker {ref.broker} at {addr}: offsets of {ref.topic} queue {ref.queue_id} "
                f"unavailable: {exc}"
            ) from None
        return QueueState(addr, low, high)

    def snapshot(self, topics: Iterable[str], *, want_min: bool = True) -> Snapshot:
        """Every readable queue of ``topics`` with its broker address and offset bounds."""
        names = list(topics)

        async def job(instance: ClientInstance) -> Snapshot:
            queues: dict[QueueRef, str] = {}
            for topic in names:
                queues.update(await self._route_queues(instance, topic))
            refs = sorted(queues)
            states = await asyncio.gather(*(self._bounds(instance, r, queues[r], want_min) for r in refs))
            return dict(zip(refs, states, strict=True))

        return self._run(job)

    def commit_offsets(self, group: str, offsets: dict[QueueRef, int], addrs: dict[QueueRef, str]) -> None:
        """Write a consumer group's offsets to the brokers (UPDATE_CONSUMER_OFFSET), so lag tools see them."""

        async def job(instance: ClientInstance) -> None:
            for ref, offset in sorted(offsets.items()):
                addr = addrs.get(ref)
                if addr is None:
                    continue
                try:
                    conn = await instance.connection(addr)
                    await api.update_consumer_offset(conn, group, ref.topic, ref.queue_id, offset)
                except (RemotingError, api.BrokerError) as exc:
                    raise BrokerUnavailableError(
                        f"broker {ref.broker} at {addr}: committing {group} offset of {ref.topic} "
                        f"queue {ref.queue_id} failed: {exc}"
                    ) from None

        self._run(job)

    def check_namesrv(self) -> None:
        """Fail early, on the driver, when no name server answers."""

        async def job(instance: ClientInstance) -> None:
            await instance.namesrv_call(lambda conn: api.get_route(conn, AUTO_CREATE_TOPIC_KEY))

        self._run(job)


def snapshot(
    namesrv: str,
    topics: Iterable[str],
    *,
    want_min: bool = True,
    credentials: tuple[str, str] | None = None,
) -> Snapshot:
    with Cluster(namesrv, credentials) as cluster:
        return cluster.snapshot(topics, want_min=want_min)


def check_namesrv(namesrv: str, credentials: tuple[str, str] | None = None) -> None:
    with Cluster(namesrv, credentials) as cluster:
        cluster.check_namesrv()
