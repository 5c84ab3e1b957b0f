"""The plain ACL's accounts and permissions (Java 4.9's Permission and PlainAccessResource), and the file
watcher that keeps the rules in force current.

An account's ``topicPerms`` and ``groupPerms`` stay apart here; the broker writes a group as its retry
topic when it checks one, nsqd has no groups at all.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from tidemq.acl.address import AddressMatcher, address_matcher
from tidemq.acl.file import AccountConfig, AclFileConfig, AclFileError, load_acl_config
from tidemq.aio import cancel_and_wait

log = logging.getLogger(__name__)

# Java's Permission bits.
DENY = 1
ANY = 1 << 1
PUB = 1 << 2
SUB = 1 << 3

#: How often the file's modification time is looked at (Java watches the file the same way).
RELOAD_INTERVAL_S = 0.5


def parse_perm(text: str) -> int:
    """Java's parsePermFromString: anything unknown is DENY (the file loader refuses it earlier)."""
    return {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB}.get(text.strip(), DENY)


def check_permission(needed: int, owned: int) -> bool:
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def _perm_map(items: list[str]) -> dict[str, int]:
    out = {}
    for item in items:
        name, _, perm = item.partition("=")
        out[name.strip()] = parse_perm(perm)
    return out


@dataclass(slots=True)
class Account:
    access_key: str
    secret_key: str
    white_address: AddressMatcher
    admin: bool
    default_topic_perm: int
    default_group_perm: int
    #: topic -> permission bits
    topic_perms: dict[str, int] = field(default_factory=dict)
    #: group -> permission bits
    group_perms: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_config(cls, cfg: AccountConfig) -> Account:
        return cls(
            access_key=cfg.access_key,
            secret_key=cfg.secret_key,
            white_address=address_matcher(cfg.white_remote_address),
            admin=cfg.admin,
            default_topic_perm=parse_perm(cfg.default_topic_perm),
            default_group_perm=parse_perm(cfg.default_group_perm),
            topic_perms=_perm_map(cfg.topic_perms),
            group_perms=_perm_map(cfg.group_perms),
        )

    @property
    def unrestricted(self) -> bool:
        """Java's checkPerm skips every resource check for an admin that lists no permissions."""
        return self.admin and not self.topic_perms and not self.group_perms

    def topic_perm(self, topic: str) -> int:
        """The bits this account owns on ``topic``: its own entry, else its default."""
        return self.topic_perms.get(topic, self.default_topic_perm)

    def group_perm(self, group: str) -> int:
        return self.group_perms.get(group, self.default_group_perm)


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

    def globally_white(self, ip: str) -> bool:
        return any(match(ip) for match in self.global_white)


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


#: The reloading task's name (one per process in ``tidemq server``, shared by the front-ends).
WATCH_TASK = "acl-file-watcher"


class AclWatcher:
    """The rules in force and the task that reloads them when the file's modification time moves; a
    reload that fails keeps the rules in force (and logs the line that is wrong)."""

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
        if self._task is None:  # one reloading task however many front-ends share the rules
            self._task = asyncio.create_task(self._watch(), name=WATCH_TASK)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(RELOAD_INTERVAL_S)
            self.reload_if_changed()

    async def close(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None
