"""``tidemq nsq publish`` (like to_nsq) and ``tidemq nsq tail`` (like nsq_tail), on tidemq's NSQ client."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import sys
from collections.abc import Iterator
from typing import BinaryIO

import click

from tidemq.nsq.client import Config, Consumer, Message, NSQClientError, Producer
from tidemq.nsq.protocol import valid_name

#: Publishes in flight per nsqd before to_nsq waits for acknowledgements.
PUBLISH_WINDOW = 256


def _options(values: tuple[str, ...], option: str) -> Config:
    """go-nsq style ``name=value`` options (``--consumer-opt``/``--producer-opt``)."""
    config = Config()
    for item in values:
        name, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint=option)
        try:
            config.set(name, value)
        except (ValueError, TypeError, NSQClientError) as exc:
            raise click.BadParameter(f"{name}: {exc}", param_hint=option) from None
    return config


def _records(stream: BinaryIO, delimiter: bytes) -> Iterator[bytes]:
    """Split stdin on the delimiter without reading it whole; empty records are skipped, as to_nsq does."""
    pending = b""
    read = getattr(stream, "read1", stream.read)
    while chunk := read(65536):
        pending += chunk
        *records, pending = pending.split(delimiter)
        yield from (r for r in records if r)
    if pending:
        yield pending


async def _publish(
    addresses: tuple[str, ...], topic: str, records: Iterator[bytes], rate: int, config: Config
) -> int:
    producers = [Producer(addr, config) for addr in addresses]
    pending: list[asyncio.Future[None]] = []
    interval = 1 / rate if rate else 0.0
    count = 0
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        for record in records:
            for producer in producers:  # to_nsq sends every line to every nsqd
                pending.append(producer.publish_async(topic, record))
            count += 1
            if len(pending) >= PUBLISH_WINDOW:
                await asyncio.gather(*pending)
                pending.clear()
            if interval:
                await asyncio.sleep(max(0.0, started + count * interval - loop.time()))
        await asyncio.gather(*pending)
    finally:
        for producer in producers:
            await producer.stop()
    return count


async def _tail(
    topic: str,
    channel: str,
    nsqd: tuple[str, ...],
    lookupd: tuple[str, ...],
    total: int,
    print_topic: bool,
    config: Config,
) -> int:
    consumer = Consumer(topic, channel, config)
    done = asyncio.Event()
    shown = 0
    out = sys.stdout.buffer

    async def show(message: Message) -> None:
        nonlocal shown
        if total and shown >= total:
            message.requeue(0, backoff=False)  # not ours to take: leave it for the next reader
            return
        if print_topic:
            out.write(topic.encode() + b" | ")
        out.write(message.body + b"\n")
        out.flush()
        shown += 1
        if total and shown >= total:
            done.set()

    consumer.add_handler(show)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, done.set)
    await consumer.connect_to_nsqds(list(nsqd))
    await consumer.connect_to_lookupds(list(lookupd))
    await done.wait()
    await consumer.stop(timeout=5.0)
    return shown


def register(main: click.Group) -> None:
    @main.group()
    def nsq() -> None:
        """NSQ tools: publish stdin lines to a topic, tail a topic."""

    @nsq.command()
    @click.option("--topic", required=True, help="Topic to publish to.")
    @click.option(
        "--nsqd-tcp-address",
        "nsqd_tcp_addresses",
        multiple=True,
        required=True,
        help="nsqd TCP address (repeatable; every line goes to each).",
    )
    @click.option("--delimiter", default="\n", show_default=repr("\n"), help="Record separator.")
    @click.option("--rate", type=click.IntRange(min=0), default=0, help="Throttle to this many records/s.")
    @click.option("--producer-opt", multiple=True, help="go-nsq option NAME=VALUE (repeatable).")
    def publish(
        topic: str,
        nsqd_tcp_addresses: tuple[str, ...],
        delimiter: str,
        rate: int,
        producer_opt: tuple[str, ...],
    ) -> None:
        """Publish stdin, one message per record, like to_nsq."""
        if not valid_name(topic):
            raise click.BadParameter(f"{topic!r} is not a valid topic name", param_hint="--topic")
        if not delimiter:
            raise click.BadParameter("must not be empty", param_hint="--delimiter")
        config = _options(producer_opt, "--producer-opt")
        records = _records(sys.stdin.buffer, delimiter.encode())
        try:
            count = asyncio.run(_publish(nsqd_tcp_addresses, topic, records, rate, config))
        except (NSQClientError, OSError) as exc:
            raise click.ClickException(f"publish failed: {exc}") from None
        click.echo(f"published {count} messages to {topic}", err=True)

    @nsq.command()
    @click.option("--topic", required=True, help="Topic to read.")
    @click.option("--channel", default=None, help="Channel [default: a new tail<N>#ephemeral one].")
    @click.option(
        "--nsqd-tcp-address", "nsqd_tcp_addresses", multiple=True, help="nsqd TCP address (repeatable)."
    )
    @click.option(
        "--lookupd-http-address",
        "lookupd_http_addresses",
        multiple=True,
        help="lookupd HTTP address (repeatable).",
    )
    @click.option(
        "-n", "total", type=click.IntRange(min=0), default=0, help="Exit after N messages (0: never)."
    )
    @click.option("--max-in-flight", type=click.IntRange(min=1), default=200, show_default=True)
    @click.option("--print-topic", is_flag=True, help="Prefix each message with its topic.")
    @click.option("--consumer-opt", multiple=True, help="go-nsq option NAME=VALUE (repeatable).")
    def tail(
        topic: str,
        channel: str | None,
        nsqd_tcp_addresses: tuple[str, ...],
        lookupd_http_addresses: tuple[str, ...],
        total: int,
        max_in_flight: int,
        print_topic: bool,
        consumer_opt: tuple[str, ...],
    ) -> None:
        """Print a topic's messages to stdout, one per line, like nsq_tail."""
        if not nsqd_tcp_addresses and not lookupd_http_addresses:
            raise click.UsageError("give --nsqd-tcp-address or --lookupd-http-address")
        if nsqd_tcp_addresses and lookupd_http_addresses:
            raise click.UsageError("use --nsqd-tcp-address or --lookupd-http-address, not both")
        channel = channel or f"tail{random.randrange(1_000_000)}#ephemeral"
        for name, hint in ((topic, "--topic"), (channel, "--channel")):
            if not valid_name(name):
                raise click.BadParameter(f"{name!r} is not a valid name", param_hint=hint)
        config = _options(consumer_opt, "--consumer-opt")
        config.max_in_flight = (
            min(max_in_flight, total) if total else max_in_flight
        )  # fetch no more than shown
        try:
            asyncio.run(
                _tail(topic, channel, nsqd_tcp_addresses, lookupd_http_addresses, total, print_topic, config)
            )
        except (NSQClientError, OSError) as exc:
            raise click.ClickException(f"tail failed: {exc}") from None
