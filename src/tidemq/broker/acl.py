"""The broker's plain ACL (Java 4.9's PlainAccessValidator and PlainPermissionManager).

One guard on the broker's dispatcher checks every request before any processor sees it: global white
addresses pass, then the account named by ``AccessKey`` must exist, its own white address passes, else
the ``Signature`` must match and each resource the request touches must be permitted. The accounts
file and its reloading are ``tidemq.acl``'s (nsqd's AUTH reads the same file); this module is the
RocketMQ side: the signature over the remoting headers.
"""

from __future__ import annotations

import logging

from tidemq.acl import AclRules, AclWatcher
from tidemq.broker.acl_rules import AclDenied, check_account_perms, needed_resources
from tidemq.remoting.acl_signature import ACCESS_KEY, SIGNATURE, calc_signature, signed_content
from tidemq.remoting.codes import ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.transport import RemotingConnection

log = logging.getLogger(__name__)


def remote_ip(conn: RemotingConnection) -> str:
    host = conn.peer[0]
    return host[7:] if host.startswith("::ffff:") else host


def validate(rules: AclRules, request: RemotingCommand, ip: str) -> None:
    """Raise AclDenied unless ``request`` from ``ip`` is allowed (Java's PlainPermissionManager.validate)."""
    if rules.globally_white(ip):
        return
    access_key = request.ext_fields.get(ACCESS_KEY)
    if access_key is None:
        raise AclDenied("No accessKey is configured")
    account = rules.accounts.get(access_key)
    if account is None:
        raise AclDenied(f"No acl config for {access_key}")
    if account.white_address(ip):
        return
    expected = calc_signature(signed_content(request.ext_fields, request.body), account.secret_key)
    if request.ext_fields.get(SIGNATURE) != expected:
        raise AclDenied(f"Check signature failed for accessKey={access_key}")
    try:
        needed = needed_resources(request)
    except (ValueError, AttributeError, TypeError) as exc:
        raise AclDenied(f"cannot read the resources of request code={request.code}: {exc}") from None
    check_account_perms(account, request.code, needed)


class AclService:
    """The rules in force (reloaded by an ``AclWatcher``) and the dispatcher's guard that applies them.

    ``tidemq server`` hands the broker the watcher nsqd uses too (``owned=False``: the server starts and
    stops it), so the file is read once per change and both front-ends apply the same rules; a standalone
    broker owns its watcher.
    """

    def __init__(self, watcher: AclWatcher, *, owned: bool = True) -> None:
        self.watcher = watcher
        self.owned = owned

    @property
    def rules(self) -> AclRules:
        return self.watcher.rules

    def start(self) -> None:
        if self.owned:
            self.watcher.start()

    async def close(self) -> None:
        if self.owned:
            await self.watcher.close()

    def guard(self, conn: RemotingConnection, request: RemotingCommand) -> RemotingCommand | None:
        ip = remote_ip(conn)
        try:
            validate(self.rules, request, ip)
        except AclDenied as exc:
            log.warning("acl: refused request code=%d from %s: %s", request.code, conn.address, exc)
            return request.error(ResponseCode.NO_PERMISSION, str(exc))
        return None
