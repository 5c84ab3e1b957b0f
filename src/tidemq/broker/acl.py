"""The broker's plain ACL (Java 4.9's PlainAccessValidator and PlainPermissionManager).

One guard on the broker's dispatcher checks every request before any processor sees it: global white
addresses pass, then the account named by ``AccessKey`` must exist, its own white address passes, else
the ``Signature`` must match and each resource the request touches must be permitted. The file is
watched by its modification time and reloaded; a reload that fails keeps the rules in force.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from tidemq.aio import cancel_and_wait
from tidemq.broker.acl_address import AddressMatcher, address_matcher
from tidemq.broker.acl_file import AclFileConfig, AclFileError, load_acl_config
from tidemq.broker.acl_rules import Account, AclDenied, check_account_perms, needed_resources
from tidemq.remoting.acl_signature import ACCESS_KEY, SIGNATURE, calc_signature, signed_content
from tidemq.remoting.codes import ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.transport import RemotingConnection

log = logging.getLogger(__name__)

#: How often the file's modification time is looked at (Java watches the file the same way).
RELOAD_INTERVAL_S = 0.5


@dataclass(slots=True)
class AclRules:
    """One loaded version of the file."""

    global_white: list[AddressMatcher]
    accounts: dict[str, Account]

    @classmethod
    def from_config(cls, config: AclFileConfig) -> AclRules:
        return cls(
            [address_matcher(p) for p in config.global_white_remote_addresses],
            {a.access_key: Account.from_config(a) for a in config.accounts},
        )


def read_acl_file(path: Path) -> AclRules:
    """Load and compile the file; AclFileError (with the line) for anything wrong in it."""
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AclFileError(0, f"cannot read {path}: {exc}") from None
    config = load_acl_config(source)
    try:
        return AclRules.from_config(config)
    except ValueError as exc:
        raise AclFileError(0, str(exc)) from None


def remote_ip(conn: RemotingConnection) -> str:
    host = conn.peer[0]
    return host[7:] if host.startswith("::ffff:") else host


def validate(rules: AclRules, request: RemotingCommand, ip: str) -> None:
    """Raise AclDenied unless ``request`` from ``ip`` is allowed (Java's PlainPermissionManager.validate)."""
    if any(match(ip) for match in rules.global_white):
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
    """The rules in force, the guard that applies them and the task that reloads them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rules = read_acl_file(path)
        self._mtime = self._stat()
        self._task: asyncio.Task[None] | None = None

    def _stat(self) -> int | None:
        try:
            return os.stat(self.path).st_mtime_ns
        except OSError:
            return None

    def guard(self, conn: RemotingConnection, request: RemotingCommand) -> RemotingCommand | None:
        ip = remote_ip(conn)
        try:
            validate(self.rules, request, ip)
        except AclDenied as exc:
            log.warning("acl: refused request code=%d from %s: %s", request.code, conn.address, exc)
            return request.error(ResponseCode.NO_PERMISSION, str(exc))
        return None

    def reload_if_changed(self) -> bool:
        """Reload when the file's modification time moved; True when new rules are in force."""
        mtime = self._stat()
        if mtime is None or mtime == self._mtime:
            return False
        self._mtime = mtime
        try:
            self.rules = read_acl_file(self.path)
        except AclFileError as exc:
            log.error("acl: %s: %s; the previous rules stay in force", self.path, exc)
            return False
        log.info("acl: reloaded %s (%d accounts)", self.path, len(self.rules.accounts))
        return True

    def start(self) -> None:
        self._task = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(RELOAD_INTERVAL_S)
            self.reload_if_changed()

    async def close(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])
