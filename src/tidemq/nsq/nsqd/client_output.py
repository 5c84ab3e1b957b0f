"""What nsqd writes to one client, and when: the output half of a connection (connection.py).

Three rules meet here. Output is buffered for one loop pass (``OutputBuffer``; held during a TLS
upgrade). With sync flush, output written after a FIN waits until the FIN journal's fsync covers that FIN,
so a frame seen after a FIN proves the FIN durable (connection.py's docstring). And a client that stops
reading is back-pressured (``WriteFlow``), then dropped.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tidemq.aio import Bytes, OutputBuffer
from tidemq.nsq.nsqd.write_flow import WriteFlow
from tidemq.nsq.protocol import OK, FrameType, NSQError, encode_frame, encode_messages

if TYPE_CHECKING:
    from tidemq.nsq.nsqd.connection import NsqConnection

log = logging.getLogger(__name__)

_OK_FRAME = encode_frame(FrameType.RESPONSE, OK)


class ClientOutput:
    def __init__(self, conn: NsqConnection) -> None:
        self.conn = conn
        #: nsqd's output buffer with a timeout of one loop pass (held during a TLS upgrade).
        self.buffer = OutputBuffer(self._send)
        self.flow = WriteFlow(self._stalled)
        #: Sync flush: the FIN journal position of this connection's last FIN, until it is durable.
        self.fin_gate = 0
        #: Output written after a FIN that was not durable yet: (journal position it waits for, data).
        self.held: list[tuple[int, Bytes]] = []
        self._journal = conn.nsqd.journal
        self._max_pending = conn.nsqd.config.max_pending_output_bytes

    def send_response(self, data: bytes) -> None:
        self.buffer.write(encode_frame(FrameType.RESPONSE, data))

    def send_ok(self) -> None:
        """``send_response(OK)`` with the frame encoded once (a publish's answer)."""
        self.buffer.write(_OK_FRAME)

    def send_error(self, err: NSQError) -> None:
        self.buffer.write(encode_frame(FrameType.ERROR, err.payload))

    def send_messages(self, messages: list[tuple[int, int, bytes, bytes]]) -> None:
        self.flow.queued_bytes += sum([len(message[3]) for message in messages])
        self.buffer.write_parts(encode_messages(messages))

    def hold_behind_fin(self, position: int) -> None:
        """A FIN went to the journal at ``position``: output from now on waits until it is durable."""
        self.fin_gate = position
        self._journal.waiters.add(self)

    def drop(self) -> None:
        """The socket is gone: nothing held is written, and no stall timer fires."""
        self._journal.waiters.discard(self)
        self.held.clear()
        self.flow.cancel()

    def fins_durable(self, durable: int) -> bool:
        """The FIN journal is durable up to ``durable``: write the output that waited for that, in order;
        True once nothing waits any more."""
        held = self.held
        ready = 0
        while ready < len(held) and held[ready][0] <= durable:
            ready += 1
        if ready:
            parts = [data for _, data in held[:ready]]
            del held[:ready]
            self._write(parts[0] if len(parts) == 1 else b"".join(parts))
        if held or self.fin_gate > durable:
            return False
        self.fin_gate = 0
        self.conn.output_released()
        return True

    def _send(self, data: Bytes) -> None:
        """The output buffer's sink: held while a FIN before it is not durable, else written."""
        conn = self.conn
        if self.flow.written() and conn.channel is not None:  # delivery waited for this write: go on
            self._send_now(data)
            if conn.receiving:
                conn.channel.pump()
            return
        self._send_now(data)

    def _send_now(self, data: Bytes) -> None:
        if self.fin_gate:
            if self.held or self.fin_gate > self._journal.durable:
                self.held.append((self.fin_gate, data))
                return
            self.fin_gate = 0
        self._write(data)

    def _write(self, data: Bytes) -> None:
        """One (compressed) write; a client that stopped reading is dropped."""
        conn = self.conn
        transport = conn.transport
        if transport is None or transport.is_closing():
            return
        if conn.compression is not None:
            data = conn.compression.compress(data)
        transport.write(data)
        if transport.get_write_buffer_size() > self._max_pending:
            log.warning(
                "client %s is not reading: %d bytes pending; disconnecting it",
                conn.remote,
                transport.get_write_buffer_size(),
            )
            transport.abort()

    def _stalled(self) -> None:
        """Nothing drained for a heartbeat interval: nsqd's write deadline would fail the write here."""
        conn = self.conn
        if conn.transport is not None:
            log.warning(
                "client %s read nothing for %d ms with %d bytes pending; disconnecting it",
                conn.remote,
                conn.heartbeat_interval_ms or conn.nsqd.config.client_timeout_ms,
                conn.transport.get_write_buffer_size(),
            )
            conn.transport.abort()
