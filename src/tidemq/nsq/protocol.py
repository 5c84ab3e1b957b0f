"""Sans-IO codec of NSQ's TCP protocol V2 (docs/protocols/nsq-tcp.md): commands in, frames out, and back.

Both directions live here: the server parses commands and writes frames; a client writes commands and
parses frames. Nothing here does I/O.
"""

from __future__ import annotations

import enum
import re
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

#: The nsqd and nsqlookupd release whose protocols and answers tidemq reproduces.
VERSION = "1.3.0"
MAGIC_V2 = b"  V2"
#: nsqlookupd's TCP protocol, which frames commands the same way.
MAGIC_V1 = b"  V1"
MAX_LINE = 16 * 1024
HEARTBEAT = b"_heartbeat_"
OK = b"OK"
CLOSE_WAIT = b"CLOSE_WAIT"
MESSAGE_HEADER = struct.Struct(">qH16s")  # timestamp ns, attempts, id
_SIZE = struct.Struct(">i")
#: "PUB " + a topic name of at most 64 bytes + "\n".
_PUB_LINE_MAX = 4 + 64 + 1
_FRAME_HEAD = struct.Struct(">ii")
#: A message frame's whole head: size, frame type, then the message header.
_MESSAGE_HEAD = struct.Struct(">iiqH16s")
_NAME = re.compile(r"^[.a-zA-Z0-9_-]+(#ephemeral)?$")
MAX_MPUB_COUNT = 1_048_575  # (max body size - 4) / 5, as nsqd bounds it
#: Messages of a big MPUB decoded between yields (``decode_mpub_steps``): a few ms of slicing.
MPUB_DECODE_STEP = 8192
BODY_COMMANDS = frozenset({b"IDENTIFY", b"AUTH", b"PUB", b"DPUB", b"MPUB"})


class FrameType(enum.IntEnum):
    RESPONSE = 0
    ERROR = 1
    MESSAGE = 2


_MESSAGE = int(FrameType.MESSAGE)  # a plain int: an enum member costs a lookup per message


class NSQError(Exception):
    """An error frame: ``code`` (E_INVALID, ...) and whether the connection must close after it."""

    def __init__(self, code: str, description: str, fatal: bool = True, answer: bool = True) -> None:
        super().__init__(f"{code} {description}")
        self.code = code
        self.description = description
        self.fatal = fatal
        #: False where nsqd just drops the connection without an error frame.
        self.answer = answer

    @property
    def payload(self) -> bytes:
        return f"{self.code} {self.description}".encode() if self.description else self.code.encode()


def go_quote(text: str) -> str:
    """Go's ``%q`` of a string: nsqd quotes names that way in its error texts."""
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def valid_name(name: str) -> bool:
    """Topic and channel names: ``[.a-zA-Z0-9_-]+`` with an optional ``#ephemeral``, 1..64 bytes."""
    return 0 < len(name.encode()) <= 64 and _NAME.match(name) is not None


def is_ephemeral(name: str) -> bool:
    return name.endswith("#ephemeral")


# --- frames (server -> client) ----------------------------------------------------------------------


def encode_frame(frame_type: int, data: bytes) -> bytes:
    return _FRAME_HEAD.pack(4 + len(data), frame_type) + data


def encode_message(timestamp_ns: int, attempts: int, msg_id: bytes, body: bytes) -> bytes:
    """A message frame, header included."""
    return b"".join(encode_messages([(timestamp_ns, attempts, msg_id, body)]))


def encode_messages(messages: Iterable[tuple[int, int, bytes, bytes]]) -> list[bytes]:
    """Message frames for (timestamp ns, attempts, id, body): each head, then its body as a part of its
    own, for a writer whose one join is the bodies' only copy."""
    parts: list[bytes] = []
    append, pack = parts.append, _MESSAGE_HEAD.pack
    for timestamp_ns, attempts, msg_id, body in messages:
        append(pack(30 + len(body), _MESSAGE, timestamp_ns, attempts & 0xFFFF, msg_id))
        append(body)
    return parts


@dataclass(slots=True)
class Message:
    timestamp: int
    attempts: int
    id: bytes
    body: bytes


def decode_message(data: bytes | memoryview) -> Message:
    if len(data) < MESSAGE_HEADER.size:
        raise NSQError("E_BAD_MESSAGE", f"message frame of {len(data)} bytes is shorter than 26")
    ts, attempts, msg_id = MESSAGE_HEADER.unpack_from(data, 0)
    return Message(ts, attempts, msg_id, bytes(data[MESSAGE_HEADER.size :]))


_T = TypeVar("_T")
_MESSAGE = int(FrameType.MESSAGE)


def _bad_size(size: int) -> NSQError:
    return NSQError("E_BAD_FRAME", f"frame size {size} out of range")


class FrameParser:
    """Client side: bytes in, frames out.

    Frames are sliced straight out of the received chunk (one copy per frame). Bytes of an incomplete frame
    are set aside and only joined once enough has arrived to finish it, so a large frame spread over many
    reads is copied once, not once per read.
    """

    def __init__(self, max_frame: int = 64 * 1024 * 1024) -> None:
        self._parts: list[bytes] = []
        self._have = 0
        #: How many buffered bytes the next frame needs before parsing can make progress.
        self._need = 0
        self.max_frame = max_frame

    def feed(self, data: bytes | bytearray | memoryview) -> list[tuple[int, bytes]]:
        """All complete frames as ``(frame_type, data)``, message frames undecoded."""
        out: list[tuple[int, bytes]] = []
        buf = self._gather(data)
        if buf is None:
            return out
        pos = 0
        end = len(buf)
        while end - pos >= 8:
            size, frame_type = _FRAME_HEAD.unpack_from(buf, pos)
            if size < 4 or size > self.max_frame:
                raise _bad_size(size)
            stop = pos + 4 + size
            if stop > end:
                break
            out.append((frame_type, buf[pos + 8 : stop]))
            pos = stop
        self._keep(buf, pos)
        return out

    def feed_messages(
        self, data: bytes | bytearray | memoryview, make: Callable[..., _T], *context: object
    ) -> tuple[list[_T], list[tuple[int, int, bytes]]]:
        """Complete frames, with messages decoded on the way: ``(messages, others)``.

        Each message is ``make(id, body, timestamp, attempts, *context)``; each other frame is
        ``(n, frame_type, data)`` where ``n`` counts the messages that came before it, so the caller can
        replay the original order.
        """
        msgs: list[_T] = []
        others: list[tuple[int, int, bytes]] = []
        buf = self._gather(data)
        if buf is None:
            return msgs, others
        append = msgs.append
        head = _MESSAGE_HEAD.unpack_from
        short_head = _FRAME_HEAD.unpack_from
        head_size = _MESSAGE_HEAD.size
        max_frame = self.max_frame
        pos = 0
        end = len(buf)
        while end - pos >= 8:
            if end - pos >= head_size:
                size, frame_type, ts, attempts, msg_id = head(buf, pos)
            else:
                size, frame_type = short_head(buf, pos)
            if size < 4 or size > max_frame:
                raise _bad_size(size)
            stop = pos + 4 + size
            if stop > end:
                break
            if frame_type == _MESSAGE:
                if size < head_size - 4:
                    raise NSQError("E_BAD_MESSAGE", f"message frame of {size - 4} bytes is shorter than 26")
                append(make(msg_id, buf[pos + head_size : stop], ts, attempts, *context))
            else:
                others.append((len(msgs), frame_type, buf[pos + 8 : stop]))
            pos = stop
        self._keep(buf, pos)
        return msgs, others

    def _gather(self, data: bytes | bytearray | memoryview) -> bytes | None:
        """What to parse now: ``data`` itself when nothing is pending, None while a frame is incomplete."""
        if type(data) is not bytes:
            data = bytes(data)
        parts = self._parts
        if not parts:
            return data
        parts.append(data)
        self._have += len(data)
        if self._have < self._need:
            return None
        buf = b"".join(parts)
        parts.clear()
        return buf

    def _keep(self, buf: bytes, pos: int) -> None:
        rest = len(buf) - pos
        if not rest:
            return
        self._parts.append(buf[pos:] if pos else buf)
        self._have = rest
        self._need = 4 + _SIZE.unpack_from(buf, pos)[0] if rest >= 8 else 8


# --- commands (client -> server) ----------------------------------------------------------------------


def encode_command(name: str, *params: str | bytes, body: bytes | None = None) -> bytes:
    parts = [name.encode()] + [p if isinstance(p, bytes) else p.encode() for p in params]
    line = b" ".join(parts) + b"\n"
    return line if body is None else line + _SIZE.pack(len(body)) + body


def encode_mpub(topic: str, bodies: list[bytes]) -> bytes:
    payload = _SIZE.pack(len(bodies)) + b"".join(_SIZE.pack(len(b)) + b for b in bodies)
    return encode_command("MPUB", topic, body=payload)


def decode_mpub(body: bytes, max_msg_size: int) -> list[bytes]:
    """MPUB's body: a count, then length-prefixed messages; all or nothing
    (docs/protocols/nsq-tcp.md#mpub)."""
    msgs: list[bytes] = []
    for _ in decode_mpub_steps(body, max_msg_size, msgs):
        pass
    return msgs


def mpub_count(body: bytes | None) -> int:
    """The message count an MPUB body announces (0 if it has none): whether it is worth decoding in steps."""
    return _SIZE.unpack_from(body, 0)[0] if body and len(body) >= 4 else 0


def decode_mpub_steps(
    body: bytes, max_msg_size: int, msgs: list[bytes], step: int = MPUB_DECODE_STEP
) -> Iterator[None]:
    """``decode_mpub`` into ``msgs``, pausing (a ``yield``) every ``step`` messages, so that a caller on
    the event loop can let others run while a million tiny messages are decoded."""
    if len(body) < 4:
        raise NSQError("E_BAD_BODY", "MPUB failed to read message count")
    (count,) = _SIZE.unpack_from(body, 0)
    if count <= 0 or count > MAX_MPUB_COUNT or count * 4 > len(body) - 4:
        raise NSQError("E_BAD_BODY", f"MPUB invalid message count {count}")
    pos = 4
    for i in range(count):
        if i % step == step - 1:
            yield
        if pos + 4 > len(body):
            raise NSQError("E_BAD_BODY", "MPUB failed to read message body size")
        (size,) = _SIZE.unpack_from(body, pos)
        pos += 4
        if size <= 0:
            raise NSQError("E_BAD_MESSAGE", f"MPUB invalid message({i}) body size {size}")
        if size > max_msg_size:
            raise NSQError("E_BAD_MESSAGE", f"MPUB message too big {size} > {max_msg_size}")
        if pos + size > len(body):
            raise NSQError("E_BAD_BODY", "MPUB failed to read message body")
        msgs.append(body[pos : pos + size])
        pos += size
    if pos != len(body):
        raise NSQError("E_BAD_BODY", f"MPUB body has {len(body) - pos} bytes past its {count} messages")


@dataclass(slots=True)
class Command:
    name: bytes
    params: list[bytes]
    body: bytes | None = None


@dataclass(slots=True)
class FinRun:
    """FIN lines back to back, read as one item: a consumer sends one per message, in runs."""

    ids: list[bytes]


@dataclass(slots=True)
class BodyAhead:
    """A body command's line has been read and its body is next (only with ``announce_bodies``).

    Parsing waits here for the caller, who checks the line: it calls ``refuse()`` on the parser (nsqd
    closes the connection on any refusal, so parsing ends there) or goes on, and the parser reads the
    body, bounded by its size limits, and yields the command whole.
    """

    command: Command


#: FIN lines back to back: each exactly ``FIN <16-byte id>\n``, the id without a space, a line end or a
#: trailing CR (a line with any of those is parsed, and answered, as the command it is). One match takes a
#: whole run at C speed instead of checking line by line in Python.
_FIN_RUN = re.compile(rb"(?:FIN [^ \n]{15}[^ \n\r]\n)+")


class CommandParser:
    """Server side: the magic, then command lines and their bodies.

    Body sizes are checked against the limits before the body is buffered, so an oversized PUB is refused
    without reading it. An error is yielded in place of the command; a fatal one ends parsing. The parser
    calls nothing back: with ``announce_bodies`` it yields a ``BodyAhead`` for each body command's line,
    so the caller can refuse it before the body is read, as nsqd and nsqlookupd do.
    """

    magic = MAGIC_V2
    body_commands = BODY_COMMANDS
    #: Yield well-formed FIN lines that come back to back as one ``FinRun``.
    fin_runs = True

    def __init__(
        self,
        max_body_size: int = 5 * 1024 * 1024,
        max_msg_size: int = 1024 * 1024,
        *,
        announce_bodies: bool = False,
    ) -> None:
        self.announce_bodies = announce_bodies
        self._buf = bytearray()
        self._magic_seen = False
        self._pos = 0  # where the unparsed bytes start in _buf, while feeding
        self._pending: Command | None = None
        self._body_size = -1
        self.max_body_size = max_body_size
        self.max_msg_size = max_msg_size
        self.broken = False

    def feed(self, data: bytes | memoryview) -> Iterator[Command | FinRun | NSQError | BodyAhead]:
        """What ``data`` completes, in order. A generator: the caller acts on each item (``refuse()`` a
        ``BodyAhead``) before the next is parsed."""
        if self.broken:
            return
        buf = self._buf
        buf += data
        if not self._magic_seen:
            if len(buf) < 4:
                return
            if bytes(buf[:4]) != self.magic:
                self.broken = True
                yield NSQError("E_BAD_PROTOCOL", "")
                return
            del buf[:4]
            self._magic_seen = True
        # The consumed bytes are cut once, at the end: cutting after each command moved the rest of the
        # buffer every time (a read of 1,000 FINs moved ~10 MB).
        self._pos = 0
        try:
            while not self.broken:
                item = self._next()
                if item is None:
                    return
                if isinstance(item, NSQError) and item.fatal:
                    self.broken = True
                yield item
        finally:
            del buf[: self._pos]
            self._pos = 0

    def whole_pub(self, data: bytes | memoryview) -> Command | None:
        """``data`` as one PUB when it is exactly one whole, well-sized PUB and nothing is buffered, else
        None (then ``feed`` it). A producer waiting for each OK sends just that, so this skips the buffer,
        the generator and the ``BodyAhead`` step; the caller still checks the line before storing it."""
        if self._buf or self._pending is not None or self.broken or not self._magic_seen:
            return None
        if data[:4] != b"PUB ":
            return None
        view = memoryview(data)
        end = bytes(view[:_PUB_LINE_MAX]).find(b"\n")  # a longer line has no valid topic: the general path
        if end < 0 or len(view) < end + 5:
            return None
        (size,) = _SIZE.unpack_from(view, end + 1)
        if len(view) != end + 5 + size or not 0 < size <= self.max_msg_size:
            return None
        line = bytes(view[4:end])
        if not line or line.endswith(b"\r") or b" " in line:
            return None  # nsqd's errors for such lines come from the general path
        return Command(b"PUB", [line], bytes(view[end + 5 :]))

    def refuse(self) -> None:
        """The caller refused the ``BodyAhead`` just yielded: nothing more is parsed."""
        self.broken = True

    def _next(self) -> Command | FinRun | NSQError | BodyAhead | None:
        buf, pos = self._buf, self._pos
        if self._pending is not None:
            if self._body_size < 0:
                if len(buf) - pos < 4:
                    return None
                (size,) = _SIZE.unpack_from(buf, pos)
                self._pos = pos = pos + 4
                problem = self._body_size_problem(self._pending.name, size)
                if problem is not None:
                    return problem
                self._body_size = size
            if len(buf) - pos < self._body_size:
                return None
            cmd = self._pending
            self._pos = pos + self._body_size
            cmd.body = bytes(buf[pos : self._pos])
            self._pending, self._body_size = None, -1
            return cmd
        if self.fin_runs and buf.startswith(b"FIN ", pos) and (run := _FIN_RUN.match(buf, pos)):
            self._pos = run.end()
            lines = bytes(buf[pos : self._pos])
            return FinRun([lines[at + 4 : at + 20] for at in range(0, len(lines), 21)])
        end = buf.find(b"\n", pos)
        if end < 0:
            return self._line_too_long() if len(buf) - pos > MAX_LINE else None
        line = bytes(buf[pos:end])
        self._pos = end + 1
        cmd = self._parse_line(line)
        if cmd.name in self.body_commands:
            self._pending = cmd
            return BodyAhead(cmd) if self.announce_bodies else self._next()
        return cmd

    def _line_too_long(self) -> NSQError:
        return NSQError("E_INVALID", f"command line longer than {MAX_LINE} bytes", answer=False)

    def _parse_line(self, line: bytes) -> Command:
        if line.endswith(b"\r"):
            line = line[:-1]
        name, *params = line.split(b" ")
        return Command(name, params)

    def _body_size_problem(self, name: bytes, size: int) -> NSQError | None:
        verb = name.decode()
        if name in (b"PUB", b"DPUB"):
            if size <= 0:
                return NSQError("E_BAD_MESSAGE", f"{verb} invalid message body size {size}")
            if size > self.max_msg_size:
                return NSQError("E_BAD_MESSAGE", f"{verb} message too big {size} > {self.max_msg_size}")
            return None
        if size <= 0:
            return NSQError("E_BAD_BODY", f"{verb} invalid body size {size}")
        if size > self.max_body_size:
            return NSQError("E_BAD_BODY", f"{verb} body too big {size} > {self.max_body_size}")
        return None


def parse_int(raw: bytes, verb: str, what: str) -> int:
    """nsqd's digit-only integer parsing: no sign, an empty value is 0."""
    if raw and not raw.isdigit():
        raise NSQError("E_INVALID", f"{verb} could not parse {what} {raw.decode(errors='replace')}")
    return int(raw) if raw else 0
