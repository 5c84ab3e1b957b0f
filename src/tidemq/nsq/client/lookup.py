"""nsqlookupd discovery over HTTP (docs/protocols/nsq-lookupd.md#http-api,
docs/protocols/nsq-lookupd.md#discovery, docs/protocols/nsq-client.md#discovery): which nsqd have a topic."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import aiohttp
import orjson

from tidemq.address import join_host_port
from tidemq.nsq.client.errors import NSQClientError
from tidemq.nsq.http import ACCEPT_V1


class LookupdError(NSQClientError):
    """A lookupd query failed (unreachable, non-200, or an unreadable body)."""


def build_lookup_url(addr: str, topic: str) -> str:
    """go-nsq's ``buildLookupAddr``: add a scheme, require a port, default the path to ``/lookup``."""
    url = addr if "://" in addr else "http://" + addr
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"invalid lookupd address {addr!r}: {exc}") from None
    if port is None:
        raise ValueError(f"invalid lookupd address {addr!r}: missing port")
    path = parts.path if parts.path not in ("", "/") else "/lookup"
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "topic"]
    query.append(("topic", topic))
    return urlunsplit((parts.scheme, parts.netloc, path, urlencode(query), ""))


def producer_addresses(body: bytes) -> list[str]:
    """``broadcast_address:tcp_port`` of each producer; accepts the bare and the legacy ``data`` form."""
    try:
        data: Any = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise LookupdError(f"lookupd answered non-JSON {body[:200]!r}: {exc}") from None
    if not isinstance(data, dict):
        raise LookupdError(f"lookupd answered {type(data).__name__}, expected an object")
    producers = data.get("producers")
    if producers is None and isinstance(data.get("data"), dict):
        producers = data["data"].get("producers")
    addrs = []
    for producer in producers or []:
        try:
            addrs.append(join_host_port(str(producer["broadcast_address"]), int(producer["tcp_port"])))
        except (KeyError, TypeError, ValueError):
            raise LookupdError(
                f"lookupd producer entry without broadcast_address/tcp_port: {producer!r}"
            ) from None
    return addrs


async def query_lookupd(session: aiohttp.ClientSession, url: str, auth_secret: str = "") -> list[str]:
    headers = {"Accept": ACCEPT_V1}
    if auth_secret:
        headers["Authorization"] = f"Bearer {auth_secret}"
    try:
        async with session.get(url, headers=headers) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise LookupdError(f"lookupd {url}: HTTP {resp.status} {body[:200]!r}")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise LookupdError(f"lookupd {url}: {exc or type(exc).__name__}") from exc
    return producer_addresses(body)
