"""One client connection to nsqd: the TCP V2 state machine (docs/protocols/nsq-tcp.md); its AUTH is an
AuthSession.

With sync flush a FIN, which nsqd never answers, is made durable before anything nsqd writes to the
connection after it: output from then on is held until the FIN journal's fsync covers the FIN (one fsync
serves every connection's FINs, like the commit log's for publishes). So a consumer that has seen any
frame written after its FIN (a message the freed RDY let through, the answer to a later command, a
heartbeat) knows a crash cannot bring that message back.

A connection has two states: the protocol ``State`` (verbs.py: which verbs it may send; /stats shows
it) and its ``Lifecycle`` (lifecycle.py: open, closing once held output is written, closed), which moves
only through ``_move``. Publishing, with its own state (the answers waiting for an fsync, the worker's
wait for it: the ``Writer`` state), is the connection's ``Publisher`` (publisher.py); what it writes, with
the FIN gate above and the back-pressure on a client that stops reading, its ``ClientOutput``
(client_output.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, cast

import orjson

from tidemq.aio import BufferedReceiver
from tidemq.nsq.compression import CompressionError, Deflate, Snappy, StreamCompression
from tidemq.nsq.nsqd import identify, refusal
from tidemq.nsq.nsqd.auth import AuthSession
from tidemq.nsq.nsqd.channel import Channel
from tidemq.nsq.nsqd.client_output import ClientOutput
from tidemq.nsq.nsqd.config import TLSRequired
from tidemq.nsq.nsqd.lifecycle import TRANSITIONS, Event, Lifecycle, Writer
from tidemq.nsq.nsqd.publisher import Publisher, is_big_mpub
from tidemq.nsq.nsqd.verbs import VERBS, State, Verb, unknown_verb, wrong_state
from tidemq.nsq.nsqd.write_flow import OUTPUT_HIGH_WATER
from tidemq.nsq.protocol import (
    CLOSE_WAIT,
    HEARTBEAT,
    OK,
    BodyAhead,
    Command,
    CommandParser,
    FinRun,
    NSQError,
    go_quote,
    parse_int,
    valid_name,
)

if TYPE_CHECKING:
    from tidemq.nsq.nsqd.server import Nsqd

log = logging.getLogger(__name__)

_OPEN = Lifecycle.OPEN
_AWAITING_FSYNC = Writer.AWAITING_FSYNC


class NsqConnection(BufferedReceiver):
    def __init__(self, nsqd: Nsqd) -> None:
        cfg = nsqd.config
        self.nsqd = nsqd
        self.parser = CommandParser(cfg.max_body_size, cfg.max_msg_size, announce_bodies=True)
        self.transport: asyncio.Transport | None = None
        #: The protocol state: which verbs the client may send (``VERBS``).
        self.state = State.INIT
        #: Whether it still reads commands and takes messages (lifecycle.py); moved only by ``_move``.
        self.lifecycle = Lifecycle.OPEN
        #: What the last IDENTIFY negotiated; None until the first one.
        self.negotiated: identify.Negotiated | None = None
        self.client_id = ""
        self.hostname = ""
        self.user_agent = ""
        self.remote = ""
        self.rdy = 0
        self.in_flight = 0
        self.msg_timeout_ms = cfg.msg_timeout_ms
        self.sample_rate = 0
        self.heartbeat_interval_ms = cfg.client_timeout_ms // 2
        self.channel: Channel | None = None
        self.last_read = time.monotonic()
        self.connected_at = int(time.time())
        self.stats = {"message_count": 0, "finish_count": 0, "requeue_count": 0}
        self.tls = False
        self._tls_required = cfg.tls_required is not TLSRequired.NO
        self.compression: StreamCompression | None = None
        self.auth_session = AuthSession(nsqd.authenticator, nsqd.auth_required, self._peer)
        self._commands: deque[Command | FinRun | NSQError] = deque()
        #: PUB, MPUB and DPUB: their stored-but-unanswered publishes and the wait for the fsync.
        self.publisher = Publisher(self)
        self._worker: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        #: What is written to the client: buffered, held behind FINs not yet durable, back-pressured.
        self.output = ClientOutput(self)
        self._sync_flush = nsqd.sync_flush

    # --- asyncio.BufferedProtocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self.remote = f"{peer[0]}:{peer[1]}" if peer else ""
        if not refusal.admit(self.nsqd.tcp_gate, transport, self.remote_ip):
            return  # the transport now belongs to a RefusedConnection
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        self.transport.set_write_buffer_limits(high=OUTPUT_HIGH_WATER, low=OUTPUT_HIGH_WATER // 4)
        self.client_id = self.hostname = peer[0] if peer else ""
        if self.auth_session.required and self.nsqd.authenticator.exempt(self.remote_ip):
            self.auth_session.required = False  # a global white address of the ACL file
        self.nsqd.connections.add(self)
        self._heartbeat = asyncio.ensure_future(self._heartbeats())

    def data_received(self, data: memoryview) -> None:
        self.last_read = time.monotonic()
        chunk: bytes | memoryview = data
        if self.compression is not None:
            try:
                chunk = self.compression.decompress(data)
            except CompressionError as exc:
                log.info(
                    "client %s sent a corrupt %s stream (%s); closing",
                    self.remote,
                    self.compression.name,
                    exc,
                )
                self.close()
                return
        commands, parser = self._commands, self.parser
        pub = parser.whole_pub(chunk)
        if pub is not None:  # the read is one whole PUB: what a producer waiting for each OK sends
            problem = self._line_problem(pub)
            if problem is not None:
                parser.refuse()
            commands.append(pub if problem is None else problem)
        else:
            for item in parser.feed(chunk):
                if isinstance(item, BodyAhead):
                    problem = self._line_problem(item.command)
                    if problem is not None:  # nsqd refuses on the line alone, before reading the body
                        parser.refuse()
                        commands.append(problem)
                else:
                    commands.append(item)
        # What this read answers inline (a PUB's OK, FIN errors, the messages a FIN made room for) leaves
        # in one write as the read ends, not a loop pass later.
        corked = self.output.buffer.cork()
        try:
            if self._worker is None or self._worker.done():
                if not self._run_inline():
                    self._worker = asyncio.ensure_future(self._work())
            elif self.publisher.writer is _AWAITING_FSYNC:
                self._run_inline()  # publishes that came meanwhile are stored now; the next fsync covers them
        finally:
            if corked:
                self.output.buffer.uncork()

    def connection_lost(self, exc: Exception | None) -> None:
        self.nsqd.tcp_gate.release(self.remote_ip)
        self._move(Event.LOST)
        self.nsqd.connections.discard(self)
        self.output.drop()
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        if self.channel is not None:
            self.nsqd.unsubscribe(self.channel, self)

    @property
    def pub_counts(self) -> dict[str, int]:
        """Messages this client published per topic (/stats)."""
        return self.publisher.pub_counts

    @property
    def remote_ip(self) -> str:
        return self.remote.rsplit(":", 1)[0]

    @property
    def receiving(self) -> bool:
        """Subscribed, open, and its writes are draining: nothing more is delivered to a client whose
        transport is over its high-water mark or that already has WRITE_BYTES queued this pass."""
        return self.state is State.SUBSCRIBED and self.lifecycle is _OPEN and self.output.flow.open

    # --- flow control: asyncio calls these as the transport's buffer crosses its marks -------------

    def pause_writing(self) -> None:
        self.output.flow.pause((self.heartbeat_interval_ms or self.nsqd.config.client_timeout_ms) / 1000)

    def resume_writing(self) -> None:
        self.output.flow.resume()
        if self.channel is not None and self.receiving:
            self.channel.pump()

    # --- output: client_output.py ---------------------------------------------------------------------

    def send_response(self, data: bytes) -> None:
        self.output.send_response(data)

    def send_error(self, err: NSQError) -> None:
        self.output.send_error(err)

    def send_messages(self, messages: list[tuple[int, int, bytes, bytes]]) -> None:
        self.stats["message_count"] += len(messages)
        self.output.send_messages(messages)

    def output_released(self) -> None:
        """Nothing waits behind a FIN any more: a close that waited for that output happens now."""
        if self.lifecycle is Lifecycle.CLOSE_PENDING:
            self._move(Event.RELEASED)
            if self.transport is not None:
                self.transport.close()

    def close(self) -> None:
        """Close after what is queued has been written (a fatal error frame must reach the client); from
        here on nothing more is read from it or delivered to it."""
        self.output.buffer.flush()
        # the last frames may wait for a FIN to be durable; the socket closes after them
        self._move(Event.CLOSE_HELD if self.output.held else Event.CLOSE)
        if self.lifecycle is Lifecycle.CLOSED and self.transport is not None:
            self.transport.close()

    def _move(self, event: Event) -> None:
        self.lifecycle = TRANSITIONS.advance(self.lifecycle, event)

    async def _heartbeats(self) -> None:
        """Heartbeat every interval; two missed beats (no bytes in 2 intervals) end the connection."""
        while True:
            interval = self.heartbeat_interval_ms / 1000
            if interval <= 0:
                await asyncio.sleep(1.0)
                continue
            await asyncio.sleep(interval)
            if time.monotonic() - self.last_read > 2 * interval:
                log.info("client %s missed two heartbeats; closing", self.remote)
                self.close()
                return
            self.send_response(HEARTBEAT)

    # --- commands -------------------------------------------------------------------------------------

    def _run_inline(self) -> bool:
        """Handle the queued commands that never wait right here: FIN, RDY, REQ, TOUCH, NOP, CLS, and
        publishes unless AUTH may make them wait.

        A consumer sends one FIN per message; answering those without a task, a coroutine per command and
        a channel pump per FIN (one pump covers them all) is most of nsqd's work per message. With sync
        flush a publish is stored here too and only its answer waits for the fsync: while answers wait,
        only publishes run ahead (consumers see them at once, the next fsync covers them), and anything
        else, an error included, waits its turn behind those answers. Returns True once nothing is left
        (no command, no answer waiting); else the worker task takes over from there, in order.
        """
        commands, publisher = self._commands, self.publisher
        pump = False
        check_tls = self._tls_missing
        while commands and self.lifecycle is _OPEN:
            item = commands[0]
            if (publisher.unanswered or publisher.writer is _AWAITING_FSYNC) and not _is_publish(item):
                break  # answers are waiting for an fsync: only publishes run ahead of them
            if isinstance(item, FinRun):
                commands.popleft()
                self._fin_run(item.ids, check_tls)
                pump = True
                continue
            if not isinstance(item, Command):
                break
            inline = _INLINE.get(item.name)
            if inline is None:
                break
            verb, handler = inline
            if verb.publish and (self.auth_session.required or is_big_mpub(item)):
                break  # the permission check may wait for the auth server; a big MPUB yields as it goes
            commands.popleft()
            try:
                if check_tls:
                    self._check_tls(item)
                if self.state not in verb.allowed:
                    if self.state in verb.ignored:
                        continue
                    raise wrong_state(item.name)
                pump |= handler(self, item)
            except NSQError as err:
                if publisher.unanswered or publisher.writer is _AWAITING_FSYNC:
                    commands.appendleft(err)  # answered in its turn, after the publishes before it
                    break
                self._answer_error(err)
        if pump and self.channel is not None:
            self.channel.pump()
        return self.lifecycle is not _OPEN or not (commands or publisher.unanswered)

    def _fin_run(self, msg_ids: list[bytes], check_tls: bool) -> None:
        """FIN lines back to back: the connection's state is checked once for the run (a refusal is fatal,
        as for a single FIN); the lines themselves were well formed."""
        try:
            if check_tls:
                self._check_tls(_FIN)
            if self.state not in _FIN_VERB.allowed:
                raise wrong_state(b"FIN")
        except NSQError as err:
            self._answer_error(err)
            return
        self._finish(msg_ids)

    def _finish(self, msg_ids: list[bytes]) -> None:
        """FIN on the channel in one pass; each id that is not this client's in flight is answered
        E_FIN_FAILED (not fatal), in order."""
        assert self.channel is not None
        position, problems = self.channel.finish_many(self, msg_ids)
        self.stats["finish_count"] += len(msg_ids) - len(problems)
        if position and self._sync_flush:
            self.output.hold_behind_fin(position)
        for problem in problems:
            self._answer_error(NSQError("E_FIN_FAILED", problem, fatal=False))

    async def _work(self) -> None:
        """What ``_run_inline`` leaves, in order: the answers that wait for an fsync (one fsync answers
        every publish stored before it), and commands that may wait, or errors."""
        commands, publisher = self._commands, self.publisher
        while self.lifecycle is _OPEN:
            try:
                if self._run_inline():
                    return
                if publisher.unanswered and not (commands and _is_publish(commands[0])):
                    await publisher.answer_publishes()
                    continue
                item = commands.popleft()
                if isinstance(item, NSQError):
                    raise item
                assert isinstance(item, Command)  # _run_inline takes every FinRun
                await self._handle(item)
            except NSQError as err:
                with contextlib.suppress(NSQError):
                    await publisher.answer_publishes()  # the answers to earlier commands go first
                self._answer_error(err)

    def _answer_error(self, err: NSQError) -> None:
        if err.answer:
            self.send_error(err)
        if err.fatal:
            log.info("client %s: %s; closing", self.remote, err)
            self._commands.clear()
            self.close()

    async def _handle(self, cmd: Command) -> None:
        handler = _QUEUED.get(cmd.name)
        if handler is None:
            raise unknown_verb(cmd.name)
        self._check_tls(cmd)
        self._check_state(cmd)
        await handler(self, cmd)

    @property
    def _tls_missing(self) -> bool:
        return self._tls_required and not self.tls

    def _check_tls(self, cmd: Command) -> None:
        if cmd.name != b"IDENTIFY" and self._tls_missing:
            raise NSQError("E_INVALID", f"cannot {cmd.name.decode()} in current state (TLS required)")

    def _check_state(self, cmd: Command) -> None:
        """``VERBS``' rule for a known verb that is never ignored (one queued, or a body command's line)."""
        if self.state not in VERBS[cmd.name].allowed:
            raise wrong_state(cmd.name)

    async def identify(self, cmd: Command) -> None:
        n = identify.negotiate(cmd.body or b"", self.nsqd.config, self.remote_ip)
        self.client_id, self.hostname, self.user_agent = n.client_id, n.hostname, n.user_agent
        self.msg_timeout_ms, self.sample_rate = n.msg_timeout_ms, n.sample_rate
        if self.negotiated is None:  # the first IDENTIFY sets the heartbeat
            self.heartbeat_interval_ms = n.heartbeat_interval_ms
            if self._heartbeat is not None:  # restart on the negotiated interval
                self._heartbeat.cancel()
            self._heartbeat = asyncio.ensure_future(self._heartbeats())
        self.negotiated = n
        if not n.feature_negotiation:
            self.send_response(OK)
            return
        self.send_response(orjson.dumps(identify.response(n, self.nsqd.config, self.auth_session.required)))
        self.output.buffer.flush()  # the reply goes out in plain text, before any upgrade
        if n.tls_v1:
            await self._upgrade_tls()
            self.send_response(OK)
            self.output.buffer.flush()
        if n.snappy or n.deflate:
            self.compression = Snappy() if n.snappy else Deflate(n.deflate_level)
            self.send_response(OK)

    async def _upgrade_tls(self) -> None:
        context = self.nsqd.ssl_context
        assert context is not None and self.transport is not None
        self.output.buffer.held = True
        try:
            transport = await asyncio.get_running_loop().start_tls(
                self.transport, self, context, server_side=True, ssl_handshake_timeout=5.0
            )
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError) as exc:
            raise NSQError("E_IDENTIFY_FAILED", f"IDENTIFY failed {exc}") from None
        finally:
            self.output.buffer.held = False
        if transport is None:
            raise NSQError("E_IDENTIFY_FAILED", "IDENTIFY failed: connection closed during TLS handshake")
        self.transport = transport
        self.tls = True

    @property
    def common_name(self) -> str:
        if not self.tls or self.transport is None:
            return ""
        cert = self.transport.get_extra_info("peercert") or {}
        for rdn in cert.get("subject", ()):
            for key, value in rdn:
                if key == "commonName":
                    return str(value)
        return ""

    def _peer(self) -> tuple[str, bool, str]:
        return self.remote_ip, self.tls, self.common_name

    async def auth(self, cmd: Command) -> None:
        if cmd.params:
            raise NSQError("E_INVALID", "AUTH invalid number of parameters")
        reply = await self.auth_session.auth((cmd.body or b"").decode(errors="replace"))
        self.send_response(orjson.dumps(reply))

    async def sub(self, cmd: Command) -> None:
        if self.heartbeat_interval_ms <= 0:
            raise NSQError("E_INVALID", "cannot SUB with heartbeats disabled")
        if len(cmd.params) < 2:
            raise NSQError("E_INVALID", "SUB insufficient number of parameters")
        topic, channel = cmd.params[0].decode(errors="replace"), cmd.params[1].decode(errors="replace")
        if not valid_name(topic):
            raise NSQError("E_BAD_TOPIC", f"SUB topic name {go_quote(topic)} is not valid")
        if not valid_name(channel):
            raise NSQError("E_BAD_CHANNEL", f"SUB channel name {go_quote(channel)} is not valid")
        await self.auth_session.check("SUB", topic, channel)
        self.channel = self.nsqd.subscribe(topic, channel, self)
        self.state = State.SUBSCRIBED
        self.send_response(OK)

    # --- commands that never wait, run in a state ``VERBS`` allows: each returns whether the channel has
    # something to pump

    def ready(self, cmd: Command) -> bool:
        count = parse_int(cmd.params[0], "RDY", "count") if cmd.params else 1
        if count > self.nsqd.config.max_rdy_count:
            raise NSQError("E_INVALID", f"RDY count {count} out of range 0-{self.nsqd.config.max_rdy_count}")
        self.rdy = count
        return True

    def _message_id(self, cmd: Command, verb: str, params: int = 1) -> bytes:
        if len(cmd.params) < params:
            raise NSQError("E_INVALID", f"{verb} insufficient number of params")
        if len(cmd.params[0]) != 16:
            raise NSQError("E_INVALID", "invalid message ID")
        return cmd.params[0]

    def fin(self, cmd: Command) -> bool:
        self._finish([self._message_id(cmd, "FIN")])
        return True

    def req(self, cmd: Command) -> bool:
        msg_id = self._message_id(cmd, "REQ", params=2)
        delay = min(parse_int(cmd.params[1], "REQ", "timeout"), self.nsqd.config.max_req_timeout_ms)
        assert self.channel is not None
        problem = self.channel.requeue(self, msg_id, delay)
        if problem:
            raise NSQError("E_REQ_FAILED", problem, fatal=False)
        self.stats["requeue_count"] += 1
        return True

    def touch(self, cmd: Command) -> bool:
        msg_id = self._message_id(cmd, "TOUCH")
        assert self.channel is not None
        problem = self.channel.touch(self, msg_id, self.nsqd.config.max_msg_timeout_ms)
        if problem:
            raise NSQError("E_TOUCH_FAILED", problem, fatal=False)
        return False

    def cls(self, cmd: Command) -> bool:
        self.rdy = 0
        self.state = State.CLOSING
        self.send_response(CLOSE_WAIT)
        return False

    def nop(self, cmd: Command) -> bool:
        return False

    # --- publishing: nsqd checks the command line before it reads the body -------------------------

    def _line_problem(self, cmd: Command) -> NSQError | None:
        """What nsqd rejects on a body command's line alone, before reading (or buffering) the body."""
        try:
            self._check_tls(cmd)
            self._check_state(cmd)
            if cmd.name == b"AUTH":
                if cmd.params:
                    raise NSQError("E_INVALID", "AUTH invalid number of parameters")
            elif cmd.name != b"IDENTIFY":
                self.publisher.check_line(cmd)
        except NSQError as err:
            return err
        return None


_PUBLISHES = frozenset(name for name, verb in VERBS.items() if verb.publish)
#: What a FinRun's checks see (they read only the verb).
_FIN = Command(b"FIN", [])
_FIN_VERB = VERBS[b"FIN"]


def _is_publish(item: Command | FinRun | NSQError) -> bool:
    return isinstance(item, Command) and item.name in _PUBLISHES


def _publish_inline(conn: NsqConnection, cmd: Command) -> bool:
    return conn.publisher.publish_inline(cmd)


async def _publish(conn: NsqConnection, cmd: Command) -> None:
    await conn.publisher.publish(cmd)


InlineHandler = Callable[[NsqConnection, Command], bool]
QueuedHandler = Callable[[NsqConnection, Command], Awaitable[None]]
_INLINE_HANDLERS: dict[bytes, InlineHandler] = {
    b"PUB": _publish_inline,
    b"MPUB": _publish_inline,
    b"DPUB": _publish_inline,
    b"RDY": NsqConnection.ready,
    b"FIN": NsqConnection.fin,
    b"REQ": NsqConnection.req,
    b"TOUCH": NsqConnection.touch,
    b"CLS": NsqConnection.cls,
    b"NOP": NsqConnection.nop,
}
_QUEUED_HANDLERS: dict[bytes, QueuedHandler] = {
    b"IDENTIFY": NsqConnection.identify,
    b"AUTH": NsqConnection.auth,
    b"SUB": NsqConnection.sub,
    b"PUB": _publish,
    b"MPUB": _publish,
    b"DPUB": _publish,
}
#: ``VERBS``' inline verbs with their rule and handler (one lookup per command on the hot path).
_INLINE: dict[bytes, tuple[Verb, InlineHandler]] = {
    name: (verb, _INLINE_HANDLERS[name]) for name, verb in VERBS.items() if verb.inline
}
#: What the worker runs: the queued verbs, and publishes while AUTH is required.
_QUEUED: dict[bytes, QueuedHandler] = {
    name: _QUEUED_HANDLERS[name] for name, verb in VERBS.items() if not verb.inline or verb.publish
}
