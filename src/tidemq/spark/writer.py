"""Spark's batch and streaming writers: each task sends its rows as batch sends through a Producer.

Delivery is at-least-once: a task that fails after some sends is retried by Spark and sends those rows
again. A send the broker refuses fails the task with the broker's code and reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from tidemq.client import api
from tidemq.client.config import ClientConfig
from tidemq.client.instance import MQClientError
from tidemq.client.message import Message
from tidemq.client.producer import Producer
from tidemq.remoting.transport import RemotingError
from tidemq.spark.arrow import WriteLayout, batch_to_messages
from tidemq.spark.options import WriteOptions

log = logging.getLogger(__name__)

#: Batch sends in flight per task: the broker stores one while the next ones travel and this process
#: encodes more.
MAX_IN_FLIGHT = 8
#: Encoded bytes per batch send (bodies and properties): under the 4 MiB a broker (and the producer) takes
#: in one request by default, with room for the request's own header.
MAX_BATCH_BYTES = 4 * 1024 * 1024 - 64 * 1024
#: What a batch item costs beyond its body and its own properties: item head, properties length, and the
#: unique id the producer adds.
ITEM_OVERHEAD = 96


class SendError(RuntimeError):
    """The broker (or the route to it) refused messages; the message carries the reason."""


@dataclass
class SentCount(WriterCommitMessage):
    messages: int


def encoded_size(msg: Message) -> int:
    """An upper bound of the bytes ``msg`` takes in a batch body (UTF-8 is at most 4 bytes a character)."""
    size = len(msg.body) + ITEM_OVERHEAD
    if msg.tags or msg.keys or msg.properties:
        text = sum(len(k) + len(v) + 2 for k, v in msg.properties.items())
        text += len(msg.tags or "") + len(msg.keys or "") + 12  # their keys and separators
        size += 4 * text
    return size


def chunks(msgs: list[Message], size: int, max_bytes: int = MAX_BATCH_BYTES) -> Iterator[list[Message]]:
    """Consecutive runs of one topic, at most ``size`` messages and ``max_bytes`` encoded each."""
    run: list[Message] = []
    run_bytes = 0
    for msg in msgs:
        msg_bytes = encoded_size(msg)
        if run and (msg.topic != run[0].topic or len(run) >= size or run_bytes + msg_bytes > max_bytes):
            yield run
            run, run_bytes = [], 0
        run.append(msg)
        run_bytes += msg_bytes
    if run:
        yield run


async def _send(producer: Producer, batch: list[Message]) -> int:
    try:
        await producer.send_batch(batch)
    except (api.BrokerError, MQClientError, RemotingError) as exc:
        raise SendError(f"sending {len(batch)} messages to topic {batch[0].topic!r} failed: {exc}") from None
    return len(batch)


def send_batches(batches: Iterable[pa.RecordBatch], opts: WriteOptions, layout: WriteLayout) -> int:
    """Send every row of ``batches``; returns how many messages the brokers acknowledged."""
    loop = asyncio.new_event_loop()
    producer = Producer(
        opts.producer_group, config=ClientConfig(namesrv_addr=opts.namesrv, credentials=opts.credentials)
    )
    sent = 0
    inflight: set[asyncio.Task[int]] = set()

    def settle(tasks: set[asyncio.Task[int]]) -> int:
        count = 0
        for task in tasks:
            count += task.result()
        return count

    try:
        loop.run_until_complete(producer.start())
        for batch in batches:
            for chunk in chunks(batch_to_messages(batch, layout, opts.topic), opts.batch_size):
                inflight.add(loop.create_task(_send(producer, chunk)))
                if len(inflight) >= MAX_IN_FLIGHT:
                    done, pending = loop.run_until_complete(
                        asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
                    )
                    inflight = set(pending)
                    sent += settle(done)
        if inflight:
            done, _ = loop.run_until_complete(asyncio.wait(inflight))
            inflight = set()
            sent += settle(done)
    finally:
        for task in inflight:
            task.cancel()
        if inflight:
            loop.run_until_complete(asyncio.gather(*inflight, return_exceptions=True))
        try:
            loop.run_until_complete(producer.shutdown())
        except (MQClientError, RemotingError) as exc:
            log.warning("rocketmq sink: producer shutdown: %s", exc)
        loop.close()
    return sent


def _total(messages: list[WriterCommitMessage | None]) -> int:
    return sum(m.messages for m in messages if isinstance(m, SentCount))


class _RowSender:
    """The ``write`` both writers share: a task sends its rows and reports how many went out."""

    def __init__(self, opts: WriteOptions, layout: WriteLayout) -> None:
        self.opts = opts
        self.layout = layout

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SentCount:
        return SentCount(send_batches(iterator, self.opts, self.layout))


class BatchWriter(_RowSender, DataSourceArrowWriter):
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("rocketmq sink: %d messages sent", _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning(
            "rocketmq sink: write aborted after %d messages were sent (they stay sent)", _total(messages)
        )


class StreamWriter(_RowSender, DataSourceStreamArrowWriter):
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info("rocketmq sink: micro-batch %d: %d messages sent", batchId, _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("rocketmq sink: micro-batch %d aborted; messages already sent stay sent", batchId)
