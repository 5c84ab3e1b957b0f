"""The ``tidemq`` command: the servers in the foreground, the client commands (produce, consume, topic,
group, message), nsqlookupd alone and the NSQ tools.

The top layer: it may import any package. Command modules each ``register`` their commands here; the
work stays in the packages, the CLI parses options and prints.
"""

from __future__ import annotations

import logging
import tomllib
from typing import Any

import click

from tidemq import __version__


def load_config_file(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--config FILE``: TOML whose keys are option names; the command line still wins."""
    if value is None:
        return None
    try:
        with open(value, "rb") as f:
            data: dict[str, Any] = tomllib.load(f)
    except OSError as exc:
        raise click.BadParameter(f"cannot read {value}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise click.BadParameter(f"{value} is not valid TOML: {exc}") from None
    known = {p.name for p in ctx.command.params if p.name}
    defaults = {}
    for key, item in data.items():
        name = key.replace("-", "_")
        if name not in known:
            raise click.BadParameter(f"{value}: unknown setting {key!r}")
        defaults[name] = item
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return value


@click.group()
@click.version_option(__version__, prog_name="tidemq")
@click.option(
    "--log-level",
    default=None,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    help="[default: INFO for the servers; ERROR for the client commands, whose -v shows more]",
)
def main(log_level: str | None) -> None:
    """tidemq: a pure-Python message queue speaking RocketMQ 4.x remoting and NSQ."""
    logging.basicConfig(
        level=(log_level or "INFO").upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


from tidemq.cli import admin, console, lookupd, messages, nsq_tools, servers  # noqa: E402

for _module in (servers, lookupd, messages, admin, nsq_tools, console):
    _module.register(main)
