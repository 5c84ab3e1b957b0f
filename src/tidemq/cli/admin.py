"""``tidemq topic``, ``tidemq group`` and ``tidemq message``: look at and manage what the servers hold."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click
import orjson

from tidemq.cli.common import (
    Credentials,
    credentials_option,
    format_option,
    message_record,
    namesrv_option,
    verbose_option,
)
from tidemq.client.admin import Admin
from tidemq.client.api import BrokerError
from tidemq.client.instance import MQClientError
from tidemq.remoting.transport import RemotingError

T = TypeVar("T")


def _run(namesrv: str, credentials: Credentials, job: Callable[[Admin], Awaitable[T]]) -> T:
    async def go() -> T:
        async with Admin(namesrv, credentials=credentials) as admin:
            return await job(admin)

    try:
        return asyncio.run(go())
    except (MQClientError, BrokerError, RemotingError) as exc:
        raise click.ClickException(str(exc)) from None


def _table(headers: list[str], rows: list[list[Any]]) -> None:
    widths = [max(len(str(x)) for x in [h, *(r[i] for r in rows)]) for i, h in enumerate(headers)]
    click.echo("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    for row in rows:
        click.echo("  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)))


def register(main: click.Group) -> None:
    @main.group()
    def topic() -> None:
        """Create and inspect topics."""

    @topic.command("create")
    @namesrv_option
    @credentials_option
    @verbose_option
    @click.argument("name")
    @click.option("--queues", type=click.IntRange(1, 1024), default=4, show_default=True)
    @click.option("--cluster", default=None, help="Only the brokers of this cluster (default: every broker).")
    @click.option(
        "--message-type",
        type=click.Choice(["NORMAL", "FIFO", "DELAY", "TRANSACTION"], case_sensitive=False),
        default=None,
        help="RocketMQ 5.x message.type: the only kind gRPC producers may send (default: any).",
    )
    def topic_create(
        namesrv: str,
        credentials: Credentials,
        name: str,
        queues: int,
        cluster: str | None,
        message_type: str | None,
    ) -> None:
        """Create (or update) a topic on every master broker."""
        brokers = _run(
            namesrv,
            credentials,
            lambda a: a.create_topic(name, queues, cluster, message_type=message_type),
        )
        click.echo(f"topic {name}: {queues} queues on {', '.join(brokers)}")

    @topic.command("list")
    @namesrv_option
    @credentials_option
    @verbose_option
    def topic_list(namesrv: str, credentials: Credentials) -> None:
        """Every topic the name server routes."""
        for name in _run(namesrv, credentials, lambda a: a.topic_list()):
            click.echo(name)

    @topic.command("route")
    @namesrv_option
    @credentials_option
    @verbose_option
    @click.argument("name")
    def topic_route(namesrv: str, credentials: Credentials, name: str) -> None:
        """The topic's route: brokers and their queue counts."""
        route = _run(namesrv, credentials, lambda a: a.route(name))
        data = {
            "brokers": {
                b.broker_name: {"cluster": b.cluster, "addrs": b.addrs} for b in route.brokers.values()
            },
            "queues": [
                {
                    "broker": q.broker_name,
                    "read": q.read_queue_nums,
                    "write": q.write_queue_nums,
                    "perm": q.perm,
                }
                for q in route.queue_datas
            ],
        }
        click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode())

    @topic.command("stats")
    @namesrv_option
    @credentials_option
    @verbose_option
    @click.argument("name")
    def topic_stats(namesrv: str, credentials: Credentials, name: str) -> None:
        """Min and max offset of every queue."""
        rows = _run(namesrv, credentials, lambda a: a.topic_stats(name))
        _table(
            ["broker", "queue", "min", "max", "last update"],
            [
                [
                    r["broker"],
                    r["queue"],
                    r["minOffset"],
                    r["maxOffset"],
                    time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["lastUpdateTimestamp"] / 1000))
                    if r.get("lastUpdateTimestamp")
                    else "-",
                ]
                for r in rows
            ],
        )

    @main.group()
    def group() -> None:
        """Inspect consumer groups."""

    @group.command("progress")
    @namesrv_option
    @credentials_option
    @verbose_option
    @click.argument("name")
    @click.option("--topic", default=None, help="Only this topic.")
    @format_option
    def group_progress(
        namesrv: str, credentials: Credentials, name: str, topic: str | None, fmt: str
    ) -> None:
        """Per queue: the broker's max offset, the group's committed offset, and the lag."""
        progress = _run(namesrv, credentials, lambda a: a.group_progress(name, topic))
        rows = [
            [t, p.broker_name, p.queue_id, p.broker_offset, p.consumer_offset, p.lag]
            for t, items in sorted(progress.items())
            for p in items
        ]
        if fmt == "json":
            keys = ["topic", "broker", "queue", "broker_offset", "consumer_offset", "lag"]
            for row in rows:
                click.echo(orjson.dumps(dict(zip(keys, row, strict=True))).decode())
            return
        _table(["topic", "broker", "queue", "broker offset", "consumer offset", "lag"], rows)
        click.echo(f"total lag: {sum(p.lag for items in progress.values() for p in items)}")

    @main.group()
    def message() -> None:
        """Look messages up by id or key."""

    @message.command("get")
    @namesrv_option
    @credentials_option
    @verbose_option
    @click.option(
        "--id",
        "msg_id",
        required=True,
        help="The offset message id, or the unique key (the msg_id `tidemq produce` prints) with --topic.",
    )
    @click.option("--topic", default=None, help="Topic of the message; needed to look up a unique key.")
    def message_get(namesrv: str, credentials: Credentials, msg_id: str, topic: str | None) -> None:
        """Print one message, its body and properties, found by id (as mqadmin queryMsgById).

        An offset message id (broker address and commit-log offset, the offset_msg_id of `tidemq produce
        --format json`) is read from its broker directly. A unique key (the msg_id a producer prints) is
        looked up in the broker's index, which needs the topic.
        """
        msg = _run(namesrv, credentials, lambda a: a.message_by_id(msg_id, topic))
        click.echo(
            orjson.dumps(
                message_record(msg) | {"properties": msg.properties}, option=orjson.OPT_INDENT_2
            ).decode()
        )

    @message.command("query")
    @namesrv_option
    @credentials_option
    @verbose_option
    @click.option("--topic", required=True, help="Topic to search.")
    @click.option("--key", required=True, help="A key the producer gave the message (KEYS).")
    @click.option(
        "--max",
        "max_num",
        type=click.IntRange(1, 10_000),
        default=64,
        show_default=True,
        help="Print at most this many (a notice on stderr says when more matched).",
    )
    def message_query(namesrv: str, credentials: Credentials, topic: str, key: str, max_num: int) -> None:
        """Print the messages of a topic with a key, one JSON object a line, in the order they were stored
        (as mqadmin queryMsgByKey)."""
        found = _run(namesrv, credentials, lambda a: a.query(topic, key, max_num=max_num + 1))
        if not found:
            raise click.ClickException(f"no message with key {key!r} in {topic}")
        for msg in found[-max_num:]:  # brokers search their index newest first
            click.echo(orjson.dumps(message_record(msg)).decode())
        if len(found) > max_num:
            click.echo(
                f"more than {max_num} messages have key {key!r}: showing the newest {max_num} (see --max)",
                err=True,
            )
