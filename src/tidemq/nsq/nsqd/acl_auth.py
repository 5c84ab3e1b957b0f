"""AUTH against the plain ACL's accounts file, for ``tidemq server --acl-file`` (docs/protocols/nsq-nsqd.md
#auth-from-the-acl-file): the same accounts guard the RocketMQ broker and nsqd, with no auth server.

The secret is ``<accessKey>:<secretKey>``; the identity is the accessKey. An account's topic permissions
become nsqd authorizations: PUB lets it publish to the topic, SUB subscribe to any of its channels, its
``defaultTopicPerm`` covers topics it does not list, an admin listing no permissions may do anything (Java's
checkPerm). White addresses decide as Java's plain ACL does: a peer on a global white address needs no AUTH
at all, one on its account's ``whiteRemoteAddress`` is not asked for the secretKey and may do anything.
The authorizations last a second, so an edited file (a removed account, a changed permission) reaches
connections that already sent AUTH too.
"""

from __future__ import annotations

import hmac
import logging
import time
from dataclasses import dataclass

from tidemq.acl import PUB, SUB, Account, AclWatcher, check_permission
from tidemq.nsq.nsqd.auth import AuthError, AuthState, Grant

log = logging.getLogger(__name__)

#: How long an AUTH's authorizations are used before the rules in force are asked again.
AUTHORIZATION_TTL_S = 1.0


def plain_ip(ip: str) -> str:
    return ip[7:] if ip.startswith("::ffff:") else ip


@dataclass(slots=True, frozen=True)
class AccountGrant:
    """What one account may do on nsqd; ``account`` None means everything (white address, bare admin)."""

    account: Account | None

    @property
    def permissions(self) -> frozenset[str]:
        account = self.account
        if account is None:
            return frozenset({"publish", "subscribe"})
        owned = [account.default_topic_perm, *account.topic_perms.values()]
        names = set()
        if any(check_permission(PUB, bits) for bits in owned):
            names.add("publish")
        if any(check_permission(SUB, bits) for bits in owned):
            names.add("subscribe")
        return frozenset(names)

    def allows(self, topic: str, channel: str) -> bool:
        """nsqd's rule: a channel means subscribe (any channel of the topic), none means publish."""
        if self.account is None:
            return True
        return check_permission(SUB if channel else PUB, self.account.topic_perm(topic))


def _candidates(secret: str) -> list[tuple[str, str | None]]:
    """(accessKey, secretKey) for every ``:`` the secret could be split at, then the whole as a key alone
    (enough from the account's white address): keys may themselves hold a colon."""
    out: list[tuple[str, str | None]] = [
        (secret[:i], secret[i + 1 :]) for i, ch in enumerate(secret) if ch == ":"
    ]
    out.append((secret, None))
    return out


class AccountsAuthenticator:
    """nsqd's authenticator over the accounts file (the ``Authenticator`` interface of ``auth``)."""

    enabled = True

    def __init__(self, watcher: AclWatcher, *, owned: bool = True) -> None:
        """``owned=False``: the watcher is shared (``tidemq server``'s, also the broker's) and its owner
        starts and stops it."""
        self.watcher = watcher
        self.owned = owned

    def exempt(self, ip: str) -> bool:
        """A peer on a global white address needs no AUTH (Java lets its requests pass unsigned)."""
        return self.watcher.rules.globally_white(plain_ip(ip))

    def http_allowed(self, ip: str) -> bool:
        """HTTP carries no AUTH: only global white addresses may change anything through it."""
        return self.exempt(ip)

    async def authenticate(self, secret: str, remote_ip: str, tls: bool, common_name: str) -> AuthState:
        ip = plain_ip(remote_ip)
        accounts = self.watcher.rules.accounts
        for access_key, secret_key in _candidates(secret):
            account = accounts.get(access_key)
            if account is None:
                continue
            if account.white_address(ip):
                grant = AccountGrant(None)
            elif secret_key is not None and hmac.compare_digest(secret_key, account.secret_key):
                grant = AccountGrant(None if account.unrestricted else account)
            else:
                continue
            authorizations: list[Grant] = [grant] if grant.permissions else []
            expires = time.monotonic() + AUTHORIZATION_TTL_S
            return AuthState(identity=access_key, authorizations=authorizations, expires=expires)
        log.warning("acl: AUTH from %s refused: no account with that accessKey and secretKey", ip)
        raise AuthError("no account matches the secret")

    def start(self) -> None:
        if self.owned:
            self.watcher.start()

    async def close(self) -> None:
        if self.owned:
            await self.watcher.close()
