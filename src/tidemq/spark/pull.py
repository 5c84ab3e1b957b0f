"""Executor side of the source: read one queue's offset range with PULL_MESSAGE, as Arrow record batches.

A task opens its own connection to the broker (nothing live crosses a pickle). Without a tag filter each
pull answers exactly the offsets asked for, so a few pulls for the next offsets are kept in flight while
the current answer is decoded; the broker works while this process converts. A pull is a request and its
response future (no task), and the event loop runs once per Arrow batch, not once per pull: a broker
answers 32 records at most by default, and a task and a loop run per answer were half of a task's CPU.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from tidemq.address import split_host_port
from tidemq.client import api
from tidemq.record import MessageDecodeError
from tidemq.remoting.acl_signature import sign_request
from tidemq.remoting.codes import ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.transport import RemotingConnection, RemotingError, connect
from tidemq.spark.offsets import QueueRange, data_loss
from tidemq.spark.options import ReadOptions
from tidemq.spark.records import RecordColumns

log = logging.getLogger(__name__)

ROWS_PER_BATCH = 8192
#: Bytes of records per batch, whatever their count (large bodies).
BYTES_PER_BATCH = 64 * 1024 * 1024
#: Pulls in flight per queue: a broker answers at most 32 records per pull by default (its max transfer
#: count), so a round trip per answer would leave the task waiting; several in flight keep the broker
#: answering while this process decodes.
PIPELINE_DEPTH = 16
RECONNECTS = 3
PULL_TIMEOUT_S = 30.0


class PullError(RuntimeError):
    """The broker refused a pull, or answered with something unreadable; the message says which."""


@dataclass(slots=True)
class Answer:
    code: int
    next_begin: int
    min_offset: int
    max_offset: int
    body: bytes


class RangePuller:
    """Pulls ``[start, end)`` of one queue in order into ``columns``, keeping up to ``depth`` pulls in
    flight."""

    def __init__(self, rng: QueueRange, opts: ReadOptions, depth: int | None = None) -> None:
        self.rng = rng
        self.opts = opts
        self.cursor = rng.start
        self.chunk = opts.pull_batch_size
        self.depth = 1 if opts.filtered else max(1, depth or PIPELINE_DEPTH)
        self.columns = RecordColumns(opts.tag_set)
        self._next_request = rng.start
        self._pending: deque[tuple[int, asyncio.Future[RemotingCommand]]] = deque()
        self._conn: RemotingConnection | None = None

    @property
    def where(self) -> str:
        r = self.rng
        return f"{r.topic} {r.broker}:{r.queue_id} at {r.addr}"

    @property
    def done(self) -> bool:
        return self.cursor >= self.rng.end

    async def close(self) -> None:
        """Drop the pulls in flight and close the connection (run on the loop, so its socket closes)."""
        self._drop_pending()
        if self._conn is not None:
            self._conn.close()

    async def _connection(self) -> RemotingConnection:
        if self._conn is None or self._conn.is_closed:
            hook = None
            if self.opts.credentials is not None:
                access_key, secret_key = self.opts.credentials
                hook = functools.partial(sign_request, access_key=access_key, secret_key=secret_key)
            self._conn = await connect(*split_host_port(self.rng.addr), request_hook=hook)
        return self._conn

    def _drop_pending(self) -> None:
        """Forget the pulls in flight (an answer that still comes is dropped by the connection)."""
        for _, response in self._pending:
            response.cancel()
        self._pending.clear()
        self._next_request = self.cursor

    def _fill(self, conn: RemotingConnection) -> None:
        expression, expression_type = self.opts.subscription
        while len(self._pending) < self.depth and self._next_request < self.rng.end:
            offset = self._next_request
            n = min(self.chunk, self.rng.end - offset)
            header = api.pull_header(
                self.opts.pull_group,
                self.rng.topic,
                self.rng.queue_id,
                offset,
                max_nums=n,
                expression=expression,
                expression_type=expression_type,
            )
            self._pending.append((offset, conn.invoke_future(api.pull_request(header), PULL_TIMEOUT_S)))
            self._next_request = offset + n

    async def fill(self, rows: int) -> None:
        """Take answers until ``rows`` records (or ``BYTES_PER_BATCH``) are kept or the range is read."""
        columns = self.columns
        while not self.done and len(columns) < rows and columns.nbytes < BYTES_PER_BATCH:
            await self.step()

    async def step(self) -> None:
        """Take the next answer for the cursor into ``columns`` (some pulls add no rows)."""
        failures = 0
        while not self.done:
            try:
                self._fill(await self._connection())
                start, response = self._pending.popleft()
                if start != self.cursor:
                    response.cancel()
                    self._drop_pending()
                    continue
                answer = _answer(api.checked_pull(await response))
            except RemotingError as exc:
                failures += 1
                self._drop_pending()
                if self._conn is not None:
                    self._conn.close()
                if failures > RECONNECTS:
                    raise PullError(f"{self.where}: pulling offset {self.cursor} failed: {exc}") from None
                log.warning("%s: pull failed (%s); reconnecting", self.where, exc)
                await asyncio.sleep(0.2 * failures)
                continue
            except (api.BrokerError, KeyError, ValueError) as exc:
                raise PullError(
                    f"{self.where}: the broker refused to pull offset {self.cursor}: {exc}"
                ) from None
            self._accept(answer)
            return

    def _lost(self, message: str) -> None:
        data_loss(self.opts.fail_on_data_loss, f"{self.where}: {message}")

    def _accept(self, answer: Answer) -> None:
        end = self.rng.end
        if answer.code == ResponseCode.SUCCESS:
            try:
                seen, first = self.columns.append_records(answer.body, self.cursor, end)
            except MessageDecodeError as exc:
                raise PullError(
                    f"{self.where}: unreadable pull answer at offset {self.cursor}: {exc}"
                ) from None
            if seen and not self.opts.filtered and first > self.cursor:
                self._lost(f"offsets {self.cursor}..{first - 1} are no longer on the broker")
            if 0 < seen < self.chunk and answer.next_begin < end and not self.opts.filtered:
                self.chunk = seen  # the broker caps answers by bytes: ask for what it gives
            self._advance(answer.next_begin)
        elif answer.code == ResponseCode.PULL_RETRY_IMMEDIATELY:
            self._advance(answer.next_begin)
        elif self.cursor < answer.min_offset:
            self._lost(f"offsets {self.cursor}..{answer.min_offset - 1} are no longer on the broker")
            self._advance(answer.min_offset)
        else:
            self._lost(f"the queue ends at {answer.max_offset}, before the planned end {end}")
            self._advance(end)

    def _advance(self, offset: int) -> None:
        if offset <= self.cursor:
            raise PullError(f"{self.where}: the broker did not move past offset {self.cursor}")
        self.cursor = offset

    def take_batch(self) -> pa.RecordBatch:
        columns, self.columns = self.columns, RecordColumns(self.opts.tag_set)
        try:
            return columns.to_batch(self.rng.topic, self.rng.broker, self.rng.queue_id)
        except MessageDecodeError as exc:
            raise PullError(
                f"{self.where}: unreadable pull answer before offset {self.cursor}: {exc}"
            ) from None


def _answer(resp: RemotingCommand) -> Answer:
    ext = resp.ext_fields
    body = bytes(resp.body) if resp.code == ResponseCode.SUCCESS else b""
    return Answer(resp.code, int(ext["nextBeginOffset"]), int(ext["minOffset"]), int(ext["maxOffset"]), body)


def read_range(
    rng: QueueRange, opts: ReadOptions, rows_per_batch: int = ROWS_PER_BATCH
) -> Iterator[pa.RecordBatch]:
    """Spark's ``read()`` for one partition: Arrow batches of up to about ``rows_per_batch`` rows."""
    loop = asyncio.new_event_loop()
    puller = RangePuller(rng, opts)
    try:
        while True:
            loop.run_until_complete(puller.fill(rows_per_batch))
            if not len(puller.columns):
                return
            yield puller.take_batch()
    finally:
        loop.run_until_complete(puller.close())
        loop.close()
