"""What the client commands share: address checks, quiet logs, stopping on a signal, reading stdin."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import logging
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import click

from tidemq.address import DEFAULT_NAMESRV_ADDR, split_host_port
from tidemq.cli.nsq_options import Decorator
from tidemq.nsq.client.lookup import build_lookup_url
from tidemq.record import MessageExt

# --- addresses -------------------------------------------------------------------------------------------


def check_host_port(value: str, option: str) -> str:
    """``HOST:PORT`` or ``[v6]:PORT`` with a port of 1-65535, else a usage error naming the option."""
    try:
        split_host_port(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not HOST:PORT (port 1-65535)", param_hint=option) from None
    return value


def _namesrv(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """The name server list as the clients take it (``;`` or ``,`` between addresses), each checked now:
    a malformed one would otherwise surface as a traceback, or not at all, deep in the client."""
    addrs = [a.strip() for a in value.replace(",", ";").split(";") if a.strip()]
    if not addrs:
        raise click.BadParameter("no address given", param_hint="--namesrv")
    for addr in addrs:
        check_host_port(addr, "--namesrv")
    return value


def nsqd_addresses(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    for addr in value:
        check_host_port(addr, "--nsqd-tcp-address")
    return value


def lookupd_addresses(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """``HOST:PORT`` or an ``http(s)://`` URL, as nsq_tail takes them."""
    for addr in value:
        try:
            build_lookup_url(addr, "t")
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--lookupd-http-address") from None
    return value


namesrv_option = click.option(
    "--namesrv",
    default=DEFAULT_NAMESRV_ADDR,
    show_default=True,
    envvar="NAMESRV_ADDR",  # as mqadmin and the Java client read it
    show_envvar=True,
    callback=_namesrv,
    help="Name server HOST:PORT (several separated by ';').",
)
#: Where the keys come from when no option gives them: tidemq's own name first, then the name RocketMQ
#: applications and container images commonly export (Java's tools read the keys from conf/tools.yml,
#: which has no environment form), so a shell already set up for a RocketMQ cluster works as it is.
ACCESS_KEY_ENV = ("TIDEMQ_ACCESS_KEY", "ROCKETMQ_ACCESS_KEY")
SECRET_KEY_ENV = ("TIDEMQ_SECRET_KEY", "ROCKETMQ_SECRET_KEY")
Credentials = tuple[str, str] | None
F = TypeVar("F", bound=Callable[..., Any])


def credentials_option(command: F) -> F:
    """``--access-key`` and ``--secret-key`` (a broker's plain ACL account), handed to the command as one
    ``credentials`` argument: both or neither, since a signature needs the pair and half of it would
    only fail later, at the broker, as a less clear NO_PERMISSION."""

    @functools.wraps(command)
    def with_credentials(*args: Any, access_key: str | None, secret_key: str | None, **kwargs: Any) -> Any:
        if access_key and not secret_key:
            raise click.BadParameter(
                f"required with --access-key (or set {SECRET_KEY_ENV[0]})", param_hint="--secret-key"
            )
        if secret_key and not access_key:
            raise click.BadParameter(
                f"required with --secret-key (or set {ACCESS_KEY_ENV[0]})", param_hint="--access-key"
            )
        kwargs["credentials"] = (access_key, secret_key) if access_key and secret_key else None
        return command(*args, **kwargs)

    keys = click.option(
        "--access-key",
        envvar=list(ACCESS_KEY_ENV),
        show_envvar=True,
        default=None,
        help="AccessKey of a plain-ACL account: every request is signed (with --secret-key).",
    )(
        click.option(
            "--secret-key",
            envvar=list(SECRET_KEY_ENV),
            show_envvar=True,
            default=None,
            help="SecretKey of the --access-key account.",
        )(with_credentials)
    )
    return keys  # type: ignore[return-value]


format_option = click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)

# --- logging ---------------------------------------------------------------------------------------------

_VERBOSITY = [logging.ERROR, logging.WARNING, logging.INFO, logging.DEBUG]


def _verbosity(ctx: click.Context, param: click.Parameter, value: int) -> int:
    """A client command prints its results and one line per error; the clients' retry warnings (one per
    failed send, per failed pull) would bury them, so they show only with -v, unless --log-level says."""
    if ctx.find_root().params.get("log_level") is None:
        logging.getLogger().setLevel(_VERBOSITY[min(value, len(_VERBOSITY) - 1)])
    return value


verbose_option: Decorator = click.option(
    "-v",
    "--verbose",
    count=True,
    expose_value=False,
    callback=_verbosity,
    help="Show the client library's warnings (-vv: its info, -vvv: debug).",
)

# --- stopping on a signal ---------------------------------------------------------------------------------


class StopOnSignal:
    """SIGINT (Ctrl-C) and SIGTERM (what docker, systemd and Kubernetes send) ask a long-running command to
    finish cleanly: ``stop`` is called once and the command settles what it did (commits, awaits sends).
    A second signal ends the process at once with that signal, in case the clean stop hangs."""

    def __init__(self, stop: Callable[[], None]) -> None:
        self._stop = stop
        self.received: signal.Signals | None = None

    def install(self) -> StopOnSignal:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self._on_signal, sig)
        return self

    def _on_signal(self, sig: signal.Signals) -> None:
        if self.received is None:
            self.received = sig
            self._stop()
            return
        asyncio.get_running_loop().remove_signal_handler(sig)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)

    def describe(self) -> str:
        return f" (stopped by {self.received.name})" if self.received is not None else ""


# --- stdin ------------------------------------------------------------------------------------------------

_CHUNK = 65536
_CHUNKS_AHEAD = 4


async def stdin_records(
    delimiter: bytes, stop: asyncio.Event, *, strip_cr: bool = False
) -> AsyncIterator[bytes]:
    """Non-empty records of stdin split on ``delimiter``, ending early once ``stop`` is set.

    A thread reads the file descriptor, so the event loop never blocks on an idle pipe (``tail -f |``):
    sends already started go on being answered, and a stop signal is seen at once. It reads the raw
    descriptor, not ``sys.stdin.buffer``, so a read still waiting at exit holds no lock.
    """
    loop = asyncio.get_running_loop()
    chunks: asyncio.Queue[bytes] = asyncio.Queue()
    room = threading.Semaphore(_CHUNKS_AHEAD)
    fd = 0

    def read() -> None:
        while True:
            room.acquire()
            try:
                chunk = os.read(fd, _CHUNK)
            except OSError:
                chunk = b""
            try:
                loop.call_soon_threadsafe(chunks.put_nowait, chunk)
            except RuntimeError:  # the loop is gone: the command has finished
                return
            if not chunk:
                return

    threading.Thread(target=read, name="stdin", daemon=True).start()
    pending = b""
    while not stop.is_set():
        chunk = await _next_chunk(chunks, stop)
        if chunk is None:
            return
        room.release()
        if not chunk:
            break
        pending += chunk
        *records, pending = pending.split(delimiter)
        for record in records:
            if strip_cr and record.endswith(b"\r"):
                record = record[:-1]
            if record:
                yield record
            if stop.is_set():
                return
    if pending and not stop.is_set():
        yield pending[:-1] if strip_cr and pending.endswith(b"\r") else pending


async def _next_chunk(chunks: asyncio.Queue[bytes], stop: asyncio.Event) -> bytes | None:
    """The next chunk, or None once ``stop`` is set first."""
    get = asyncio.ensure_future(chunks.get())
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({get, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not get.done():
            get.cancel()
    return get.result() if get.done() and not get.cancelled() else None


# --- messages ---------------------------------------------------------------------------------------------


def body_text(body: bytes) -> str:
    """The body as text, as nsq_tail prints it; only bytes that are not UTF-8 are escaped (``\\xff``)."""
    return body.decode("utf-8", "backslashreplace")


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


SIGNALS_HELP = (
    "SIGINT (Ctrl-C) or SIGTERM stops it cleanly: {what}, it prints the summary and exits 0; "
    "a second signal ends it at once."
)


def discard_stdout() -> None:
    """The reader of our stdout went away (``| head``): send what is still written there nowhere, so
    the command can stop cleanly instead of dying of a broken pipe at exit."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


class Progress:
    """A progress bar on stderr for a command that knows how much it will do, shown only where it helps:
    stderr is a terminal and stdout is not (a receiving command printing to the terminal would interleave
    with its own bar), so scripts and pipes see no control characters."""

    def __init__(self, length: int | None, label: str, *, prints_to_stdout: bool) -> None:
        shown = bool(length) and sys.stderr.isatty() and not (prints_to_stdout and sys.stdout.isatty())
        self._bar: Any = click.progressbar(length=length, label=label, file=sys.stderr) if shown else None

    def __enter__(self) -> Progress:
        if self._bar is not None:
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def update(self, n: int) -> None:
        if self._bar is not None:
            self._bar.update(n)
