"""``tidemq nsq publish`` (like to_nsq) and ``tidemq nsq tail`` (like nsq_tail), on tidemq's NSQ client."""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
from dataclasses import dataclass

import click

from tidemq.cli.common import (
    SIGNALS_HELP,
    Progress,
    StopOnSignal,
    lookupd_addresses,
    nsqd_addresses,
    stdin_records,
    verbose_option,
)
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


@dataclass
class _Published:
    count: int = 0  # records read
    acknowledged: int = 0  # publishes (a record goes to every nsqd)
    failed: int = 0
    error: str | None = None
    stopped_by: str = ""


async def _publish(
    addresses: tuple[str, ...], topic: str, delimiter: bytes, rate: int, config: Config
) -> _Published:
    """Publish each stdin record to every nsqd, like to_nsq; the first failure stops the input, and every
    publish started is awaited, so the summary counts each one."""
    stop = asyncio.Event()
    signals = StopOnSignal(stop.set).install()
    out = _Published()
    producers = [Producer(addr, config) for addr in addresses]
    pending: list[asyncio.Future[None]] = []
    interval = 1 / rate if rate else 0.0
    loop = asyncio.get_running_loop()
    started = loop.time()

    async def settle() -> None:
        for result in await asyncio.gather(*pending, return_exceptions=True):
            if isinstance(result, BaseException):
                out.failed += 1
                out.error = out.error or str(result)
                stop.set()
            else:
                out.acknowledged += 1
        pending.clear()

    try:
        async for record in stdin_records(delimiter, stop):
            for producer in producers:  # to_nsq sends every record to every nsqd
                pending.append(producer.publish_async(topic, record))
            out.count += 1
            if len(pending) >= PUBLISH_WINDOW:
                await settle()
            if interval:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, started + out.count * interval - loop.time())):
                        await stop.wait()
        await settle()
    finally:
        for producer in producers:
            await producer.stop()
    out.stopped_by = signals.describe()
    return out


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
        if (total and shown >= total) or done.is_set():
            message.requeue(0, backoff=False)  # not ours to take: leave it for the next reader
            return
        if print_topic:
            out.write(topic.encode() + b" | ")
        out.write(message.body + b"\n")
        out.flush()
        shown += 1
        bar.update(1)
        if total and shown >= total:
            done.set()

    consumer.add_handler(show)
    StopOnSignal(done.set).install()
    with Progress(total, "receiving", prints_to_stdout=True) as bar:
        await consumer.connect_to_nsqds(list(nsqd))
        await consumer.connect_to_lookupds(list(lookupd))
        await done.wait()
        await consumer.stop(timeout=5.0)
    return shown


def register(main: click.Group) -> None:
    @main.group()
    def nsq() -> None:
        """NSQ tools: publish stdin lines to a topic, tail a topic."""

    @nsq.command(epilog=SIGNALS_HELP.format(what="it reads no more input, waits for the publishes under way"))
    @click.option("--topic", required=True, help="Topic to publish to.")
    @click.option(
        "--nsqd-tcp-address",
        "nsqd_tcp_addresses",
        multiple=True,
        required=True,
        callback=nsqd_addresses,
        help="nsqd TCP address (repeatable; every line goes to each).",
    )
    @click.option("--delimiter", default="\n", help="Record separator [default: a newline].")
    @click.option("--rate", type=click.IntRange(min=0), default=0, help="Throttle to this many records/s.")
    @click.option("--producer-opt", multiple=True, help="go-nsq option NAME=VALUE (repeatable).")
    @verbose_option
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
        try:
            out = asyncio.run(_publish(nsqd_tcp_addresses, topic, delimiter.encode(), rate, config))
        except (NSQClientError, OSError) as exc:
            raise click.ClickException(f"publish failed: {exc}") from None
        if out.failed:
            summary = (
                f"{out.acknowledged} publishes to {topic} acknowledged, {out.failed} failed; "
                "the rest of stdin was not read"
            )
        else:
            summary = f"published {out.count} messages to {topic}"
        if out.error is not None:
            click.echo(f"Error: publish failed: {out.error}", err=True)
        click.echo(summary + out.stopped_by, err=True)
        if out.error is not None:
            sys.exit(1)

    @nsq.command(
        epilog="SIGINT (Ctrl-C) or SIGTERM stops it cleanly: what was printed is finished (FIN), the rest "
        "goes back to the channel, and it exits 0; a second signal ends it at once."
    )
    @click.option("--topic", required=True, help="Topic to read.")
    @click.option("--channel", default=None, help="Channel [default: a new tail<N>#ephemeral one].")
    @click.option(
        "--nsqd-tcp-address",
        "nsqd_tcp_addresses",
        multiple=True,
        callback=nsqd_addresses,
        help="nsqd TCP address (repeatable).",
    )
    @click.option(
        "--lookupd-http-address",
        "lookupd_http_addresses",
        multiple=True,
        callback=lookupd_addresses,
        help="lookupd HTTP address (repeatable).",
    )
    @click.option(
        "-n", "total", type=click.IntRange(min=0), default=0, help="Exit after N messages (0: never)."
    )
    @click.option("--max-in-flight", type=click.IntRange(min=1), default=200, show_default=True)
    @click.option("--print-topic", is_flag=True, help="Prefix each message with its topic.")
    @click.option("--consumer-opt", multiple=True, help="go-nsq option NAME=VALUE (repeatable).")
    @verbose_option
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
