"""Drives the real pynsq (PyPI) Writer and Reader against an nsqd, as a standalone process.

pynsq runs on tornado's IOLoop, which wants to own its process, so the tests start this script as a
subprocess. Contract (shared with interop/nsqjs/publish.js and consume.js):

* ``publish --nsqd-tcp-address H:P --topic T [--mode pub|mpub] [--batch K]`` with bodies from
  ``--body B`` (repeatable), ``--bodies-file F`` (a JSON array of strings) or ``--count N [--prefix P]``
  (``P-0`` .. ``P-<N-1>``). Every command waits for its reply; one JSON line per acknowledged command.
* ``consume (--nsqd-tcp-address H:P | --lookupd-http-address URL) --topic T --channel C --count N
  [--max-in-flight M]``: one JSON line per message (``{"body", "attempts", "id"}``), each FINed; the
  process waits until its FINs have left the socket, then disconnects.
* ``--compression none|snappy|deflate`` asks nsqd for stream compression; not being granted it is an
  error, so a passing run proves the compressed path was used.
* ``--auth-secret S`` makes pynsq AUTH with ``S`` when nsqd asks for it.
* stdout carries JSON lines only, logs go to stderr. Exit codes: 0 success, 1 error (error frame,
  lost connection, bad arguments), 2 timeout, 3 compression requested but not granted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from typing import Any

import nsq
from nsq.reader import Reader
from nsq.writer import Writer

log = logging.getLogger("pynsq_client")

EXIT_OK, EXIT_ERROR, EXIT_TIMEOUT, EXIT_NOT_GRANTED = 0, 1, 2, 3


class Outcome:
    """Where pynsq's callbacks (running on the same asyncio loop via tornado) report the end."""

    def __init__(self) -> None:
        self.done: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def finish(self, code: int, why: str = "") -> None:
        if why:
            log.error("%s", why)
        if not self.done.done():
            self.done.set_result(code)


def emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def conn_options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {
        "snappy": args.compression == "snappy",
        "deflate": args.compression == "deflate",
    }
    if args.auth_secret:
        options["auth_secret"] = args.auth_secret  # sent as AUTH when nsqd answers auth_required
    return options


def check_identify(args: argparse.Namespace, outcome: Outcome, data: dict[str, Any]) -> None:
    log.info("IDENTIFY response: %s", data)
    if args.compression != "none" and not data.get(args.compression):
        outcome.finish(EXIT_NOT_GRANTED, f"nsqd did not grant {args.compression}: {data}")


def bodies(args: argparse.Namespace) -> list[bytes]:
    if args.bodies_file:
        with open(args.bodies_file, encoding="utf-8") as f:
            return [b.encode() for b in json.load(f)]
    if args.body:
        return [b.encode() for b in args.body]
    return [f"{args.prefix}-{i}".encode() for i in range(args.count)]


class Checked:
    """Mixed into pynsq's Writer and Reader: checks the IDENTIFY answer, turns errors into the outcome."""

    args: argparse.Namespace
    outcome: Outcome

    def _on_connection_identify_response(self, conn: Any, data: Any, **kwargs: Any) -> None:
        super()._on_connection_identify_response(conn, data, **kwargs)  # type: ignore[misc]
        check_identify(self.args, self.outcome, data)

    def _on_connection_error(self, conn: Any, error: Any, **kwargs: Any) -> None:
        if self.outcome.done.done():
            return  # the read error our own close at the end causes
        super()._on_connection_error(conn, error, **kwargs)  # type: ignore[misc]
        self.outcome.finish(EXIT_ERROR, f"connection error: {error!r}")


class CheckedWriter(Checked, Writer):
    def __init__(self, args: argparse.Namespace, outcome: Outcome, **kwargs: Any) -> None:
        self.args = args
        self.outcome = outcome
        super().__init__(**kwargs)

    def _on_connection_close(self, conn: Any, **kwargs: Any) -> None:
        super()._on_connection_close(conn, **kwargs)
        self.outcome.finish(EXIT_ERROR, "connection closed by nsqd")


async def publish(args: argparse.Namespace) -> int:
    outcome = Outcome()
    messages = bodies(args)
    writer = CheckedWriter(args, outcome, nsqd_tcp_addresses=[args.nsqd_tcp_address], **conn_options(args))
    while not writer.conns and not outcome.done.done():
        await asyncio.sleep(0.02)
    if outcome.done.done():
        return outcome.done.result()

    batches = [messages[i : i + args.batch] for i in range(0, len(messages), args.batch)]
    commands = [[m] for m in messages] if args.mode == "pub" else batches
    pending = len(commands)

    def acknowledged(command: str, count: int, conn: Any, data: Any) -> None:
        nonlocal pending
        if isinstance(data, Exception):
            outcome.finish(EXIT_ERROR, f"{command} failed: {data!r}")
            return
        emit({"command": command, "messages": count, "response": bytes(data).decode()})
        pending -= 1
        if pending == 0:
            outcome.finish(EXIT_OK)

    for group in commands:
        if args.mode == "pub":
            writer.pub(args.topic, group[0], callback=lambda c, d: acknowledged("PUB", 1, c, d))
        else:
            n = len(group)
            writer.mpub(args.topic, group, callback=lambda c, d, n=n: acknowledged("MPUB", n, c, d))
    code = await outcome.done
    for conn in list(writer.conns.values()):
        conn.close()
    return code


class CountingReader(Checked, Reader):
    def __init__(self, args: argparse.Namespace, outcome: Outcome, **kwargs: Any) -> None:
        self.args = args
        self.outcome = outcome
        self.received = 0
        self.closing = False
        super().__init__(message_handler=self.handle, **kwargs)

    def handle(self, message: Any) -> bool:
        body = bytes(message.body)
        emit(
            {"body": body.decode("utf-8", "replace"), "attempts": message.attempts, "id": message.id.decode()}
        )
        self.received += 1
        if self.received == self.args.count:
            # The FIN for this message is written when the handler returns; close only after it is out.
            self.outcome.finish(EXIT_OK)
        return True

    def _on_connection_close(self, conn: Any, **kwargs: Any) -> None:
        super()._on_connection_close(conn, **kwargs)
        if not self.closing:
            self.outcome.finish(EXIT_ERROR, "connection closed by nsqd")


async def consume(args: argparse.Namespace) -> int:
    outcome = Outcome()
    source: dict[str, Any] = (
        {"nsqd_tcp_addresses": [args.nsqd_tcp_address]}
        if args.nsqd_tcp_address
        else {"lookupd_http_addresses": [args.lookupd_http_address], "lookupd_poll_interval": 1}
    )
    reader = CountingReader(
        args,
        outcome,
        topic=args.topic,
        channel=args.channel,
        max_in_flight=args.max_in_flight,
        **source,
        **conn_options(args),
    )
    code = await outcome.done
    await asyncio.sleep(0)  # let the handler's FIN be written
    while any(c.stream is not None and c.stream.writing() for c in reader.conns.values()):
        await asyncio.sleep(0.01)
    reader.closing = True
    reader.close()
    return code


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    for name in ("publish", "consume"):
        p = sub.add_parser(name)
        p.add_argument("--topic", required=True)
        p.add_argument("--compression", choices=("none", "snappy", "deflate"), default="none")
        p.add_argument("--timeout", type=float, default=30.0)
        p.add_argument("--count", type=int, default=0)
        p.add_argument("--verbose", action="store_true")
        p.add_argument("--auth-secret", default="")
    pub = sub.choices["publish"]
    pub.add_argument("--nsqd-tcp-address", required=True)
    pub.add_argument("--mode", choices=("pub", "mpub"), default="pub")
    pub.add_argument("--batch", type=int, default=10)
    pub.add_argument("--body", action="append", default=[])
    pub.add_argument("--bodies-file")
    pub.add_argument("--prefix", default="msg")
    con = sub.choices["consume"]
    where = con.add_mutually_exclusive_group(required=True)
    where.add_argument("--nsqd-tcp-address")
    where.add_argument("--lookupd-http-address")
    con.add_argument("--channel", required=True)
    con.add_argument("--max-in-flight", type=int, default=1)
    args = parser.parse_args(argv)
    if args.action == "consume" and args.count <= 0:
        parser.error("consume needs --count N > 0")
    return args


async def main(argv: list[str]) -> int:
    args = parse(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    log.info("pynsq %s", nsq.__version__)
    action = publish if args.action == "publish" else consume
    try:
        return await asyncio.wait_for(action(args), args.timeout)
    except TimeoutError:
        log.error("timed out after %.1fs", args.timeout)
        return EXIT_TIMEOUT


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
