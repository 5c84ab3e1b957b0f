"""A TCP connection past nsqd's connection caps gets an error frame, not a silent reset
(docs/nsq-server.md#connection-limits).

nsqd has no caps, but it answers a client it will not serve the same way everywhere: an error frame,
then the close (``E_BAD_PROTOCOL`` for a wrong magic). A refused client is answered once it has sent its
4-byte magic, so it reads the frame where it expects its first answer; the socket is half-closed after
the frame and what the client still sends is read and dropped, so the close never becomes a reset that
would discard the frame unread.
"""

from __future__ import annotations

import asyncio
import logging
from typing import cast

from tidemq.connection_gate import ConnectionGate, RateLimitedLog
from tidemq.nsq.protocol import FrameType, NSQError, encode_frame

log = logging.getLogger(__name__)
#: A few lines a second however many connections are refused.
refusals = RateLimitedLog(log, 5)

#: How long a refused client may take to send its magic before it is closed unanswered.
MAGIC_WAIT_S = 5.0
#: How long after the error frame the refused socket stays half-open for the client to read it.
LINGER_S = 2.0
_MAGIC_SIZE = 4


def admit(gate: ConnectionGate, transport: asyncio.BaseTransport, ip: str) -> bool:
    """Count the connection from ``ip`` in, or hand its transport to a RefusedConnection and say no."""
    reason = gate.admit(ip)
    if reason is None:
        return True
    refusals.warning("refused TCP connection from %s: %s", ip, reason)
    refused = RefusedConnection(NSQError("E_TOO_MANY_CONNECTIONS", reason))
    transport.set_protocol(refused)
    refused.connection_made(transport)
    return False


class RefusedConnection(asyncio.Protocol):
    """Waits for the magic, answers the refusal's error frame, then closes."""

    def __init__(self, error: NSQError) -> None:
        self.error = error
        self.transport: asyncio.Transport | None = None
        self._received = 0
        self._answered = False
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        self._timer = asyncio.get_running_loop().call_later(MAGIC_WAIT_S, self._abort)

    def data_received(self, data: bytes) -> None:
        self._received += len(data)
        if not self._answered and self._received >= _MAGIC_SIZE:
            self._answer()

    def eof_received(self) -> bool | None:
        return None  # the client is done: close

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _answer(self) -> None:
        assert self.transport is not None
        self._answered = True
        self.transport.write(encode_frame(FrameType.ERROR, self.error.payload))
        if self.transport.can_write_eof():
            self.transport.write_eof()
            if self._timer is not None:
                self._timer.cancel()
            self._timer = asyncio.get_running_loop().call_later(LINGER_S, self._abort)
        else:
            self.transport.close()

    def _abort(self) -> None:
        self._timer = None
        if self.transport is not None:
            self.transport.abort()
