"""``tidemq produce`` and ``tidemq consume``."""

from __future__ import annotations

import asyncio
import functools
import os
import sys
import time
from collections.abc import AsyncIterator, Coroutine, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import click
import orjson

from tidemq.cli.common import (
    SIGNALS_HELP,
    Credentials,
    Progress,
    StopOnSignal,
    body_text,
    credentials_option,
    discard_stdout,
    format_option,
    message_record,
    namesrv_option,
    stdin_records,
    verbose_option,
)
from tidemq.client import (
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageModel,
    MQClientError,
    Producer,
    PushConsumer,
    SendResult,
    api,
)
from tidemq.client.admin import Admin
from tidemq.client.config import ClientConfig
from tidemq.client.consumer.types import ConsumeContext
from tidemq.client.producer import validate_topic
from tidemq.record import MessageExt
from tidemq.remoting.codes import ResponseCode
from tidemq.remoting.route import MASTER_ID

FROM_HELP = (
    "Where a group with no committed offset starts (a group with offsets resumes from them). "
    "last: a new group starts at the end of each queue, except a queue whose first message is still "
    "in the broker's memory (under 40% of RAM behind the log's end, as Java's "
    "checkInDiskByConsumeOffset): that queue is read from its start. first: every queue from its "
    "start. timestamp: from the first message stored at --timestamp or later (the same exception as "
    "last applies)."
)


def _timestamp(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """yyyyMMddHHmmss as Java's consumeTimestamp; checked now, not when the first queue is assigned."""
    if value is None:
        return None
    try:
        if len(value) != 14 or not value.isdigit():
            raise ValueError(value)
        datetime.strptime(value, "%Y%m%d%H%M%S")
    except ValueError:
        raise click.BadParameter(f"{value!r} is not yyyyMMddHHmmss, e.g. 20240131235959") from None
    return value


def register(main: click.Group) -> None:
    @main.command(epilog=SIGNALS_HELP.format(what="it reads no more input, waits for the sends under way"))
    @namesrv_option
    @credentials_option
    @click.option("--topic", "-t", required=True)
    @click.option("--tag", default=None, help="Tag of every message.")
    @click.option(
        "--keys", default=None, help="Keys of every message (space separated); {i} is the sequence number."
    )
    @click.option(
        "-n",
        "count",
        type=click.IntRange(min=1),
        default=None,
        help="Send N synthetic messages instead of stdin lines.",
    )
    @click.option(
        "--size",
        type=click.IntRange(min=1),
        default=100,
        show_default=True,
        help="Body size of synthetic messages.",
    )
    @click.option("--group", default="tidemq-cli-producer", show_default=True)
    @click.option(
        "--in-flight",
        type=click.IntRange(1, 1024),
        default=32,
        show_default=True,
        help="Sends awaited at once.",
    )
    @format_option
    @verbose_option
    def produce(**opts: Any) -> None:
        """Send stdin lines (or -n synthetic messages) to a topic.

        With --format json, one line per message on stdout: its acknowledgement, or its error. After the
        first failed send nothing more is read; the sends under way finish, the summary says how many
        were acknowledged and how many failed, and the exit status is 1.
        """
        if opts["count"] is None and sys.stdin.isatty():
            raise click.UsageError("give -n N, or pipe lines into stdin")
        try:
            validate_topic(opts["topic"])
        except MQClientError as exc:
            raise click.BadParameter(str(exc), param_hint="--topic") from None
        outcome = asyncio.run(_produce(**opts))
        seconds = max(outcome.seconds, 1e-9)
        summary = (
            f"sent {outcome.sent} messages to {opts['topic']} in {outcome.seconds:.2f}s "
            f"({outcome.sent / seconds:,.0f} msg/s)"
        )
        if outcome.failed:
            summary += f"; {outcome.failed} failed"
            if opts["count"] is not None and outcome.attempted < opts["count"]:
                summary += f", {opts['count'] - outcome.attempted} not sent"
            elif opts["count"] is None:
                summary += ", the rest of stdin was not read"
        if outcome.error is not None:
            click.echo(f"Error: {outcome.error}", err=True)
        click.echo(summary + outcome.stopped_by, err=True)
        if outcome.error is not None:
            sys.exit(1)

    @main.command(epilog=SIGNALS_HELP.format(what="it commits what it printed"))
    @namesrv_option
    @credentials_option
    @click.option("--topic", "-t", required=True)
    @click.option("--group", "-g", required=True)
    @click.option(
        "--tag", "expression", default="*", show_default=True, help="Tag expression, e.g. 'A || B'."
    )
    @click.option(
        "--from",
        "from_where",
        type=click.Choice(["last", "first", "timestamp"]),
        default="last",
        show_default=True,
        help=FROM_HELP,
    )
    @click.option(
        "--timestamp",
        default=None,
        callback=_timestamp,
        help="yyyyMMddHHmmss (local time) for --from timestamp [default: half an hour ago].",
    )
    @click.option("--orderly", is_flag=True, help="Consume each queue in order.")
    @click.option("--broadcast", is_flag=True, help="Every instance gets every message (local offsets).")
    @click.option("-n", "count", type=click.IntRange(min=1), default=None, help="Stop after N messages.")
    @click.option(
        "--timeout",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        help="Stop after this many seconds (exit 2 if -n messages have not come by then).",
    )
    @format_option
    @verbose_option
    def consume(**opts: Any) -> None:
        """Run a push consumer and print what it receives.

        Text output is one line per message, its body printed as text (bytes that are not UTF-8 escaped);
        --format json gives one JSON object per message. What was printed is committed.
        """
        if opts["timestamp"] is not None and opts["from_where"] != "timestamp":
            raise click.BadParameter("is only used with --from timestamp", param_hint="--timestamp")
        try:
            received, stopped_by = asyncio.run(_consume(**opts))
        except (MQClientError, ValueError) as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"consumed {received} messages{stopped_by}", err=True)
        if not stopped_by and opts["count"] is not None and received < opts["count"]:
            sys.exit(2)


class _Sends:
    """The sends of one produce run, settled as each finishes: each one started is counted as
    acknowledged or failed (and printed at once with --format json), and the first failure stops the
    input. Nothing is left unawaited, so no exception goes unreported."""

    def __init__(self, in_flight: int, fmt: str, bar: Any, stop: asyncio.Event) -> None:
        self.window = asyncio.Semaphore(in_flight)
        self.pending: set[asyncio.Future[SendResult]] = set()
        self.sent = self.failed = self.attempted = 0
        self.error: str | None = None
        self._fmt, self._bar, self._stop = fmt, bar, stop
        self._lines: list[bytes] = []

    def start(self, send: Coroutine[Any, Any, SendResult]) -> None:
        task = asyncio.ensure_future(send)
        self.pending.add(task)
        task.add_done_callback(functools.partial(self._settle, self.attempted))
        self.attempted += 1

    async def wait_all(self) -> None:
        while self.pending:
            await asyncio.wait(set(self.pending))
        self._flush()

    def _settle(self, i: int, task: asyncio.Future[SendResult]) -> None:
        self.pending.discard(task)
        self.window.release()
        self._bar.update(1)
        exc = task.exception()
        if exc is not None:
            self.failed += 1
            text = str(exc) if isinstance(exc, MQClientError) else f"{type(exc).__name__}: {exc}"
            self.error = self.error or text
            self._stop.set()
            self._emit({"i": i, "status": "FAILED", "error": text})
            return
        self.sent += 1
        if self._fmt == "json":
            result = task.result()
            mq = result.message_queue
            self._emit(
                {
                    "i": i,
                    "msg_id": result.msg_id,
                    "offset_msg_id": result.offset_msg_id,
                    "topic": mq.topic,
                    "broker": mq.broker_name,
                    "queue": mq.queue_id,
                    "queue_offset": result.queue_offset,
                    "status": result.status.value,
                }
            )

    def _emit(self, record: dict[str, Any]) -> None:
        if self._fmt != "json":
            return
        if not self._lines:  # one write for all that finish in this turn of the loop
            asyncio.get_running_loop().call_soon(self._flush)
        self._lines.append(orjson.dumps(record))

    def _flush(self) -> None:
        if not self._lines:
            return
        data, self._lines = b"\n".join(self._lines) + b"\n", []
        try:  # written at once, so a pipeline reading the acknowledgements sees them as they come
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        except BrokenPipeError:  # the reader went away (`| head`): read no more input
            discard_stdout()
            self._stop.set()


@dataclass
class _Outcome:
    sent: int
    failed: int
    attempted: int
    error: str | None
    seconds: float
    stopped_by: str


async def _produce(
    namesrv: str,
    credentials: Credentials,
    topic: str,
    tag: str | None,
    keys: str | None,
    count: int | None,
    size: int,
    group: str,
    in_flight: int,
    fmt: str,
) -> _Outcome:
    stop = asyncio.Event()  # a signal, or the first failed send: read no more
    signals = StopOnSignal(stop.set).install()

    async def bodies() -> AsyncIterator[bytes]:
        if count is None:
            async for line in stdin_records(b"\n", stop, strip_cr=True):
                yield line
            return
        for body in _synthetic(count, size):
            if stop.is_set():
                return
            yield body

    started = time.monotonic()
    config = ClientConfig(namesrv_addr=namesrv, credentials=credentials)
    async with Producer(group, config=config) as producer:
        with Progress(count if fmt == "text" else None, "sending", prints_to_stdout=False) as bar:
            sends = _Sends(in_flight, fmt, bar, stop)
            try:
                async for body in bodies():
                    await sends.window.acquire()
                    if stop.is_set():
                        break
                    i = sends.attempted
                    msg = Message(topic, body, tags=tag, keys=keys.replace("{i}", str(i)) if keys else None)
                    sends.start(producer.send(msg))
            finally:
                await sends.wait_all()  # every send started: acknowledged or failed, and reported
    return _Outcome(
        sends.sent,
        sends.failed,
        sends.attempted,
        sends.error,
        time.monotonic() - started,
        signals.describe(),
    )


def _synthetic(count: int, size: int) -> Iterator[bytes]:
    filler = os.urandom(size // 2 + 1).hex()[:size].encode()
    for _ in range(count):
        yield filler


async def _check_pull_permission(
    namesrv: str, credentials: Credentials, topic: str, group: str, expression: str
) -> None:
    """A push consumer whose heartbeats and pulls are refused logs it and keeps trying, as Java's does,
    so the command would only print nothing. One pull per master broker, signed and subscribed as the
    consumer's will be, turns an ACL refusal into an error first; anything else is the consumer's
    business (a topic not created yet, say)."""
    async with Admin(namesrv, credentials=credentials) as admin:
        route = await admin.instance.update_route(topic)
        if route is None:
            return
        first = {mq.broker_name: mq for mq in reversed(route.subscribe_queues(topic))}
        for name, mq in sorted(first.items()):
            addr = route.brokers[name].addrs.get(MASTER_ID) if name in route.brokers else None
            if addr is None:
                continue
            header = api.pull_header(group, topic, mq.queue_id, 0, max_nums=1, expression=expression)
            try:
                await api.pull_answer(await admin.instance.connection(addr), header, 5.0)
            except api.BrokerError as exc:
                if exc.code == ResponseCode.NO_PERMISSION:
                    raise MQClientError(f"broker {name} refused to let {group} read {topic}: {exc}") from None


async def _consume(
    namesrv: str,
    credentials: Credentials,
    topic: str,
    group: str,
    expression: str,
    from_where: str,
    timestamp: str | None,
    orderly: bool,
    broadcast: bool,
    count: int | None,
    timeout: float | None,
    fmt: str,
) -> tuple[int, str]:
    where = {
        "last": ConsumeFromWhere.LAST_OFFSET,
        "first": ConsumeFromWhere.FIRST_OFFSET,
        "timestamp": ConsumeFromWhere.TIMESTAMP,
    }[from_where]
    await _check_pull_permission(namesrv, credentials, topic, group, expression)
    consumer = PushConsumer(
        group,
        config=ClientConfig(namesrv_addr=namesrv, credentials=credentials),
        consume_from_where=where,
        consume_timestamp=timestamp,
        message_model=MessageModel.BROADCASTING if broadcast else MessageModel.CLUSTERING,
        await_termination_s=1.0,
    )
    consumer.subscribe(topic, expression)
    received = 0
    enough = asyncio.Event()  # -n reached, stdout gone, or a signal: print nothing more
    signals = StopOnSignal(enough.set).install()
    ok = ConsumeStatus.SUCCESS if orderly else ConsumeStatus.CONSUME_SUCCESS

    async def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        nonlocal received
        if enough.is_set():
            await asyncio.Event().wait()  # not printed: never answered, cancelled at shutdown, not committed
        # Printing and answering happen in one step of the loop, so what was printed is what is committed.
        try:
            for msg in msgs:
                if fmt == "json":
                    click.echo(orjson.dumps(message_record(msg)).decode())
                else:
                    click.echo(
                        f"{msg.topic} {msg.broker_name}:{msg.queue_id}@{msg.queue_offset} {msg.msg_id} "
                        f"tags={msg.tags or '-'} keys={msg.keys or '-'} {body_text(msg.body)}"
                    )
            sys.stdout.flush()  # written out before it is committed, and seen at once by `| grep`
        except BrokenPipeError:
            # The reader went away (`| head`): stop cleanly and leave these messages for the next consumer.
            discard_stdout()
            enough.set()
            await asyncio.Event().wait()
        received += len(msgs)
        bar.update(len(msgs))
        if count is not None and received >= count:
            enough.set()
        return ok

    consumer.register_listener(listener, orderly=orderly)
    with Progress(count, "receiving", prints_to_stdout=True) as bar:
        try:
            await consumer.start()
            async with asyncio.timeout(timeout):
                await enough.wait()
        except TimeoutError:
            pass
        finally:
            await consumer.shutdown()
    return received, signals.describe()
