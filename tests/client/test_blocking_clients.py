"""The blocking facades, used from plain threads the way non-asyncio code would."""

from __future__ import annotations

import threading
import time

import pytest

from tests.support import ServerProcess
from tidemq.client import (
    BlockingLitePullConsumer,
    BlockingProducer,
    BlockingPushConsumer,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    SendStatus,
)

pytestmark = pytest.mark.e2e


def test_blocking_producer_and_push_consumer(server: ServerProcess) -> None:
    received: list[bytes] = []
    threads: set[str] = set()
    lock = threading.Lock()

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        with lock:
            received.extend(m.body for m in msgs)
            threads.add(threading.current_thread().name)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = BlockingPushConsumer(
        "BlockGroup", server.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    )
    consumer.subscribe("Blocking", "*")
    consumer.register_listener(listener)
    with BlockingProducer("BlockPG", server.namesrv) as producer:
        result = producer.send(Message("Blocking", b"first"))
        assert result.status is SendStatus.SEND_OK
        futures = [producer.send_async(Message("Blocking", f"async{i}".encode())) for i in range(10)]
        assert all(f.result(10).status is SendStatus.SEND_OK for f in futures)
        producer.send_batch([Message("Blocking", f"batch{i}".encode()) for i in range(5)])
    with consumer:
        deadline = time.monotonic() + 15
        while len(set(received)) < 16 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert len(set(received)) == 16
    assert all(name.startswith("consume-BlockGroup") for name in threads), "listeners run on the consume pool"


def test_blocking_lite_pull(server: ServerProcess) -> None:
    with BlockingProducer("BlockLitePG", server.namesrv) as producer:
        for i in range(12):
            producer.send(Message("BlockingLite", f"{i}".encode()))
    with BlockingLitePullConsumer(
        "BlockLite", server.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    ) as c:
        queues = c.fetch_message_queues("BlockingLite")
        c.assign(queues)
        got: list[bytes] = []
        deadline = time.monotonic() + 15
        while len(got) < 12 and time.monotonic() < deadline:
            got += [m.body for m in c.poll(0.5)]
        assert sorted(got, key=int) == [f"{i}".encode() for i in range(12)]
        c.seek_to_begin(queues[0])
        again = c.poll(5)
        assert again and again[0].queue_offset == 0
