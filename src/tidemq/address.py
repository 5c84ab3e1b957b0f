"""``host:port`` addresses, as every client and server here takes them."""

from __future__ import annotations

#: The loopback address servers listen on and clients dial unless told otherwise.
LOCALHOST = "127.0.0.1"
#: Where a client looks for a name server unless told otherwise (RocketMQ's default port).
DEFAULT_NAMESRV_ADDR = f"{LOCALHOST}:9876"


def split_host_port(addr: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` to (host, port); a ValueError naming the address otherwise."""
    host, sep, port = addr.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or host != host.strip() or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{addr!r} is not host:port")
    return host, int(port)


def join_host_port(host: str, port: int) -> str:
    """``host:port`` as Go's net.JoinHostPort writes it (IPv6 hosts in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_host_port(addr: object) -> bool:
    if not isinstance(addr, str):
        return False
    try:
        split_host_port(addr)
    except ValueError:
        return False
    return True
