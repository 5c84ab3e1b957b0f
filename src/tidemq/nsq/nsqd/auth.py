"""AUTH through an auth HTTP server, as nsqd's ``--auth-http-address`` does it
(docs/protocols/nsq-nsqd.md#auth-server).

The secret a client sends is forwarded to the auth server; its answer (a TTL and a list of
topic/channel regexes with permissions) is cached on the connection and asked for again once the TTL
has run out. Errors talking to the auth server are logged here and shown to the client only as
``E_AUTH_FAILED``, so nothing about the auth server leaks to an untrusted peer.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
import orjson

from tidemq.nsq.protocol import NSQError

log = logging.getLogger(__name__)

PERMISSIONS = frozenset({"subscribe", "publish"})


class AuthError(Exception):
    """The auth server could not be asked, or its answer makes no sense."""


class Grant(Protocol):
    """One authorization: what the auth server's JSON lists, or an account of the ACL file."""

    @property
    def permissions(self) -> frozenset[str]: ...

    def allows(self, topic: str, channel: str) -> bool: ...


@dataclass(slots=True, frozen=True)
class Authorization:
    topic: re.Pattern[str]
    channels: tuple[re.Pattern[str], ...]
    permissions: frozenset[str]

    def allows(self, topic: str, channel: str) -> bool:
        """nsqd's rule: a channel means subscribe, none means publish; regexes match anywhere (Go)."""
        if ("subscribe" if channel else "publish") not in self.permissions:
            return False
        if not self.topic.search(topic):
            return False
        return any(c.search(channel) for c in self.channels)


@dataclass(slots=True)
class AuthState:
    identity: str = ""
    identity_url: str = ""
    authorizations: list[Grant] = field(default_factory=list)
    expires: float = 0.0

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self.expires

    def allows(self, topic: str, channel: str) -> bool:
        return any(a.allows(topic, channel) for a in self.authorizations)


def parse_reply(data: Any) -> AuthState:
    """Validate the auth server's JSON the way nsqd does: TTL > 0, known permissions, valid regexes."""
    if not isinstance(data, dict):
        raise AuthError("auth server reply is not a JSON object")
    ttl = data.get("ttl")
    if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl <= 0:
        raise AuthError(f"invalid TTL {ttl!r} (must be > 0)")
    authorizations: list[Grant] = []
    for item in data.get("authorizations") or []:
        if not isinstance(item, dict):
            raise AuthError("authorization is not a JSON object")
        permissions = item.get("permissions") or []
        unknown = [p for p in permissions if p not in PERMISSIONS]
        if unknown:
            raise AuthError(f"unknown permission {unknown[0]!r}")
        try:
            topic = re.compile(str(item.get("topic", "")))
            channels = tuple(re.compile(str(c)) for c in item.get("channels") or [])
        except re.error as exc:
            raise AuthError(f"invalid regex in authorization: {exc}") from None
        authorizations.append(Authorization(topic, channels, frozenset(permissions)))
    return AuthState(
        identity=str(data.get("identity") or ""),
        identity_url=str(data.get("identity_url") or ""),
        authorizations=authorizations,
        expires=time.monotonic() + ttl,
    )


class Authenticator:
    """Asks the configured auth servers in turn until one answers."""

    def __init__(
        self, addresses: list[str], method: str = "get", connect_timeout: float = 2.0, timeout: float = 5.0
    ) -> None:
        self.addresses = addresses
        self.method = method.upper()
        self._timeout = aiohttp.ClientTimeout(total=timeout, connect=connect_timeout)
        self._session: aiohttp.ClientSession | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.addresses)

    def exempt(self, ip: str) -> bool:
        """Every peer AUTHs when an auth server is configured (nsqd's rule)."""
        return False

    def http_allowed(self, ip: str) -> bool:
        """nsqd's HTTP API has no AUTH: open to everyone, as in nsqd."""
        return True

    def start(self) -> None:
        """Nothing runs in the background: the auth server is asked on AUTH."""

    async def authenticate(self, secret: str, remote_ip: str, tls: bool, common_name: str) -> AuthState:
        tls_flag = "true" if tls else "false"
        params = {"remote_ip": remote_ip, "tls": tls_flag, "secret": secret, "common_name": common_name}
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        last: Exception | None = None
        for address in self.addresses:
            url = address if "://" in address else f"http://{address}/auth"
            try:
                if self.method == "POST":
                    request = self._session.post(url, data=params)
                else:
                    request = self._session.get(url, params=params)
                async with request as resp:
                    body = await resp.read()
                    if resp.status != 200:
                        raise AuthError(f"auth server {url} answered HTTP {resp.status}")
                    return parse_reply(orjson.loads(body))
            except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError, AuthError) as exc:
                log.warning("auth request to %s failed: %s", url, exc)
                last = exc
        raise AuthError(str(last))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class Authenticates(Protocol):
    """What nsqd needs of an authenticator: the auth server's (``Authenticator``) or the ACL file's."""

    @property
    def enabled(self) -> bool: ...

    def exempt(self, ip: str) -> bool: ...

    def http_allowed(self, ip: str) -> bool: ...

    async def authenticate(self, secret: str, remote_ip: str, tls: bool, common_name: str) -> AuthState: ...

    def start(self) -> None: ...

    async def close(self) -> None: ...


#: Who is asking, as the auth server is told: remote IP, whether TLS is on, the client certificate's CN.
Peer = Callable[[], tuple[str, bool, str]]


class AuthSession:
    """One connection's AUTH: the secret it sent and the auth server's answer, asked again once its TTL
    runs out. Every refusal is the protocol's error; why the auth server failed stays in our log."""

    def __init__(self, authenticator: Authenticates, required: bool, peer: Peer) -> None:
        self.authenticator = authenticator
        self.required = required
        self.peer = peer
        self.state: AuthState | None = None
        self._secret = ""

    async def auth(self, secret: str) -> dict[str, Any]:
        """AUTH with ``secret``: the reply nsqd sends (identity and how many permissions)."""
        if self.state is not None:
            raise NSQError("E_INVALID", "AUTH already set")
        if not self.required:
            raise NSQError("E_AUTH_DISABLED", "AUTH disabled")
        self._secret = secret
        state = await self._ask()
        if not state.authorizations:
            raise NSQError("E_UNAUTHORIZED", "AUTH no authorizations found")
        count = sum(len(a.permissions) for a in state.authorizations)
        return {"identity": state.identity, "identity_url": state.identity_url, "permission_count": count}

    async def check(self, verb: str, topic: str, channel: str = "") -> None:
        """Refuse ``verb`` on the topic (publish) or channel (subscribe) unless authorized."""
        if not self.required:
            return
        if self.state is None:
            raise NSQError("E_AUTH_FIRST", f"AUTH required before {verb}")
        state = await self._ask() if self.state.expired else self.state
        if not state.allows(topic, channel):
            raise NSQError("E_UNAUTHORIZED", f'AUTH failed for {verb} on "{topic}" "{channel}"')

    async def _ask(self) -> AuthState:
        try:
            state = await self.authenticator.authenticate(self._secret, *self.peer())
        except AuthError:
            raise NSQError("E_AUTH_FAILED", "AUTH failed") from None
        self.state = state
        return state
