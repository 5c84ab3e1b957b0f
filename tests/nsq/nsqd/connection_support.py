"""An nsqd connection driven without a socket: a transport that records what is written, and the little of
nsqd and of a channel the connection's state rules reach (nothing in flight, nothing stored)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tidemq.connection_gate import ConnectionGate, ConnectionLimits
from tidemq.nsq.nsqd.config import NsqdConfig


class Transport:
    def __init__(self) -> None:
        self.data = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        self.data += bytes(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_extra_info(self, name: str) -> Any:
        return None


class Channel:
    """Nothing in flight: FIN, REQ and TOUCH of any id are refused by the channel, not the state."""

    def finish_many(self, client: object, ids: list[bytes]) -> tuple[int, list[str]]:
        return 0, [f"FIN {i.decode()} failed ID not in flight" for i in ids]

    def requeue(self, client: object, msg_id: bytes, delay: int) -> str:
        return f"REQ {msg_id.decode()} failed ID not in flight"

    def touch(self, client: object, msg_id: bytes, limit: int) -> str:
        return f"TOUCH {msg_id.decode()} failed ID not in flight"

    def pump(self) -> None:
        pass


def fake_nsqd() -> Any:
    authenticator = SimpleNamespace(configured=False)
    return SimpleNamespace(
        config=NsqdConfig(),
        authenticator=authenticator,
        auth_required=False,
        sync_flush=False,
        connections=set(),
        tcp_gate=ConnectionGate(ConnectionLimits()),
        append=lambda *args, **kwargs: 0,
        subscribe=lambda topic, channel, conn: Channel(),
        journal=SimpleNamespace(waiters=set(), durable=0),
    )
