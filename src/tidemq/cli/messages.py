"""``tidemq produce`` and ``tidemq consume``."""

from __future__ import annotations

import asyncio
import base64
import os
import sys
import time
from typing import Any

import click
import orjson

from tidemq.client import (
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageModel,
    MQClientError,
    Producer,
    PushConsumer,
)
from tidemq.client.consumer.types import ConsumeContext
from tidemq.remoting.message import MessageExt

namesrv_option = click.option(
    "--namesrv", default="127.0.0.1:9876", show_default=True, help="Name server HOST:PORT."
)
format_option = click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)


def message_record(msg: MessageExt) -> dict[str, Any]:
    try:
        body: str = msg.body.decode()
        encoding = "utf-8"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(msg.body).decode(), "base64"
    return {
        "topic": msg.topic,
        "broker": msg.broker_name,
        "queue": msg.queue_id,
        "offset": msg.queue_offset,
        "msg_id": msg.msg_id,
        "keys": msg.keys,
        "tags": msg.tags,
        "body": body,
        "body_encoding": encoding,
        "reconsume_times": msg.reconsume_times,
        "born_timestamp": msg.born_timestamp,
        "store_timestamp": msg.store_timestamp,
    }


def register(main: click.Group) -> None:
    @main.command()
    @namesrv_option
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
    def produce(**opts: Any) -> None:
        """Send stdin lines (or -n synthetic messages) to a topic."""
        if opts["count"] is None and sys.stdin.isatty():
            raise click.UsageError("give -n N, or pipe lines into stdin")
        try:
            sent, seconds = asyncio.run(_produce(**opts))
        except MQClientError as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(
            f"sent {sent} messages to {opts['topic']} in {seconds:.2f}s "
            f"({sent / max(seconds, 1e-9):,.0f} msg/s)",
            err=True,
        )

    @main.command()
    @namesrv_option
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
    )
    @click.option("--timestamp", default=None, help="yyyyMMddHHmmss for --from timestamp.")
    @click.option("--orderly", is_flag=True, help="Consume each queue in order.")
    @click.option("--broadcast", is_flag=True, help="Every instance gets every message (local offsets).")
    @click.option("-n", "count", type=click.IntRange(min=1), default=None, help="Stop after N messages.")
    @click.option(
        "--timeout",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        help="Stop after this many seconds.",
    )
    @format_option
    def consume(**opts: Any) -> None:
        """Run a push consumer and print what it receives."""
        try:
            received = asyncio.run(_consume(**opts))
        except (MQClientError, ValueError) as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"consumed {received} messages", err=True)
        if opts["count"] is not None and received < opts["count"]:
            sys.exit(2)


async def _produce(
    namesrv: str,
    topic: str,
    tag: str | None,
    keys: str | None,
    count: int | None,
    size: int,
    group: str,
    in_flight: int,
    fmt: str,
) -> tuple[int, float]:
    def bodies() -> Any:
        if count is not None:
            filler = os.urandom(size // 2 + 1).hex()[:size].encode()
            for _ in range(count):
                yield filler
        else:
            for line in sys.stdin.buffer:
                line = line.rstrip(b"\r\n")
                if line:
                    yield line

    started = time.monotonic()
    sent = 0
    pending: set[asyncio.Task[Any]] = set()
    sequence: dict[asyncio.Task[Any], int] = {}  # which input line (or synthetic message) a send carries
    async with Producer(group, namesrv) as producer:
        with (
            click.progressbar(length=count, label="sending", file=sys.stderr)
            if count and fmt == "text"
            else _nullbar() as bar
        ):
            for i, body in enumerate(bodies()):
                msg = Message(topic, body, tags=tag, keys=keys.replace("{i}", str(i)) if keys else None)
                task = asyncio.ensure_future(producer.send(msg))
                sequence[task] = i
                pending.add(task)
                if len(pending) >= in_flight:
                    done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    sent += _report(done, sequence, fmt, bar)
            if pending:
                done, _ = await asyncio.wait(pending)
                sent += _report(done, sequence, fmt, bar)
    return sent, time.monotonic() - started


class _nullbar:
    def __enter__(self) -> _nullbar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: int) -> None:
        return None


def _report(done: set[asyncio.Task[Any]], sequence: dict[asyncio.Task[Any], int], fmt: str, bar: Any) -> int:
    for task in done:
        result = task.result()  # a failed send raises MQClientError: the command stops with its message
        i = sequence.pop(task)
        if fmt == "json":
            mq = result.message_queue
            click.echo(
                orjson.dumps(
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
                ).decode()
            )
    bar.update(len(done))
    return len(done)


async def _consume(
    namesrv: str,
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
) -> int:
    where = {
        "last": ConsumeFromWhere.LAST_OFFSET,
        "first": ConsumeFromWhere.FIRST_OFFSET,
        "timestamp": ConsumeFromWhere.TIMESTAMP,
    }[from_where]
    consumer = PushConsumer(
        group,
        namesrv,
        consume_from_where=where,
        consume_timestamp=timestamp,
        message_model=MessageModel.BROADCASTING if broadcast else MessageModel.CLUSTERING,
        await_termination_s=1.0,
    )
    consumer.subscribe(topic, expression)
    received = 0
    enough = asyncio.Event()
    ok = ConsumeStatus.SUCCESS if orderly else ConsumeStatus.CONSUME_SUCCESS

    async def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        nonlocal received
        if enough.is_set():
            await asyncio.Event().wait()  # past -n: never answered, cancelled at shutdown, so never committed
        try:
            for msg in msgs:
                if fmt == "json":
                    click.echo(orjson.dumps(message_record(msg)).decode())
                else:
                    click.echo(
                        f"{msg.topic} {msg.broker_name}:{msg.queue_id}@{msg.queue_offset} {msg.msg_id} "
                        f"tags={msg.tags or '-'} keys={msg.keys or '-'} {msg.body[:200]!r}"
                    )
        except BrokenPipeError:
            # The reader went away (`| head`): stop cleanly and leave these messages for the next consumer.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            enough.set()
            await asyncio.Event().wait()
        received += len(msgs)
        if count is not None and received >= count:
            enough.set()
        return ok

    consumer.register_listener(listener, orderly=orderly)
    await consumer.start()
    try:
        async with asyncio.timeout(timeout):
            await enough.wait()
    except TimeoutError:
        pass
    finally:
        await consumer.shutdown()
    return received
