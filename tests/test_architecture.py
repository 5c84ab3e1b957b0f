"""The layering rules of ``src/tidemq``, checked on the import statements of every module.

Each package's ``__init__`` docstring says what it may import; this test holds the code to the rules that
keep the seams clean: clients speak only the wire protocol (so they work against real RocketMQ and nsqd),
the store serves every front-end without knowing any, and the codecs sit below what uses them. The
modules are parsed with :mod:`ast`, not imported, so the check is fast and sees imports made only for type
checking or inside functions too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import tidemq

SRC = Path(tidemq.__file__).parent

#: Every front-end of the store: the packages that speak a protocol or drive one.
FRONT_ENDS = (
    "tidemq.broker",
    "tidemq.nsq",
    "tidemq.remoting",
    "tidemq.namesrv",
    "tidemq.client",
    "tidemq.spark",
    "tidemq.cli",
    "tidemq.grpc",
    "tidemq.console",
)
#: What a client must never reach into: the servers' internals.
SERVER_SIDE = ("tidemq.broker", "tidemq.store", "tidemq.namesrv", "tidemq.nsq.nsqd")


@dataclass(frozen=True)
class Rule:
    """Modules under ``package`` import none of ``forbids``; when ``only`` is set, nothing of tidemq but
    ``only`` (and their own package)."""

    package: str
    forbids: tuple[str, ...] = ()
    only: tuple[str, ...] | None = None
    why: str = ""


RULES = (
    Rule("tidemq.client", forbids=SERVER_SIDE, why="a client speaks only the wire protocol"),
    Rule("tidemq.spark", forbids=SERVER_SIDE, why="the connector reads and writes through the client"),
    Rule(
        "tidemq.store",
        forbids=FRONT_ENDS,
        why="the store serves every front-end and knows none",
    ),
    Rule(
        "tidemq.remoting",
        forbids=("tidemq.broker", "tidemq.store", "tidemq.namesrv"),
        why="the RocketMQ codec and transport sit below the servers and clients that use them",
    ),
    Rule(
        "tidemq.record",
        only=("tidemq.aio", "tidemq.address"),
        why="the stored record layout is the bottom layer every other package may use",
    ),
    Rule(
        "tidemq.filter",
        only=(),
        why="subscription filters are pure rules the broker evaluates and the clients check alike",
    ),
    Rule(
        "tidemq.acl",
        only=("tidemq.record", "tidemq.aio", "tidemq.address"),
        why="the plain ACL's accounts serve the broker and nsqd alike, so they know neither",
    ),
    Rule(
        "tidemq.broker",
        forbids=("tidemq.client", "tidemq.nsq", "tidemq.namesrv", "tidemq.spark", "tidemq.cli"),
        why="the broker is one front-end on the store; the CLI and embedded wire the front-ends together",
    ),
    Rule(
        "tidemq.namesrv",
        forbids=("tidemq.broker", "tidemq.store", "tidemq.client", "tidemq.nsq"),
        why="the name server keeps routes only; it reaches brokers through the wire",
    ),
    Rule(
        "tidemq.nsq.nsqd",
        forbids=("tidemq.broker", "tidemq.remoting", "tidemq.namesrv", "tidemq.client", "tidemq.nsq.client"),
        why="nsqd is a front-end of its own on the store, sharing nothing with the RocketMQ side",
    ),
    Rule(
        "tidemq.grpc",
        forbids=(
            "tidemq.broker.processors",
            "tidemq.remoting.transport",
            "tidemq.nsq",
            "tidemq.client",
            "tidemq.namesrv",
            "tidemq.spark",
            "tidemq.cli",
        ),
        why="the gRPC front-end is the proxy in local mode: the broker's core services, not its remoting "
        "request handlers or transport",
    ),
    Rule(
        "tidemq.ops",
        only=(),
        why="the operations port serves the collectors embedded.py hands it; it knows no front-end or store",
    ),
    Rule(
        "tidemq.nsq.client",
        forbids=("tidemq.nsq.nsqd", "tidemq.store"),
        why="the NSQ client speaks only the wire protocol",
    ),
    Rule(
        "tidemq.console",
        forbids=(*SERVER_SIDE, "tidemq.grpc", "tidemq.cli", "tidemq.embedded"),
        why="the web console is a client of the public protocols (RocketMQ admin calls, NSQ's HTTP API), "
        "as rocketmq-dashboard and nsqadmin are, so it also works against real RocketMQ and nsqd",
    ),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path) -> Iterator[tuple[int, str]]:
    """(line, dotted name) for every import in ``path``; ``from a import b`` yields ``a.b``, which may be
    a module or a name in ``a`` (both are checked against the rules by prefix)."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}" if alias.name != "*" else base


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def exists(package: str) -> bool:
    return (SRC / package.removeprefix("tidemq.").replace(".", "/")).is_dir()


def forbidden(rule: Rule, name: str) -> bool:
    if any(within(name, package) for package in rule.forbids):
        return True
    return (
        rule.only is not None
        and within(name, "tidemq")
        and not any(within(name, allowed) for allowed in (*rule.only, rule.package))
    )


def violations(rule: Rule) -> list[str]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if not within(module_name(path), rule.package):
            continue
        for line, name in imported_names(path):
            if forbidden(rule, name):
                found.append(f"{path.relative_to(SRC.parent)}:{line} imports {name}")
    return found


@pytest.mark.parametrize("rule", RULES, ids=[rule.package for rule in RULES])
def test_layering(rule: Rule) -> None:
    if not exists(rule.package):
        pytest.skip(f"{rule.package} does not exist yet")
    assert violations(rule) == [], rule.why


def test_rules_name_real_packages() -> None:
    """A rule about a package that was renamed would pass forever: every forbidden name must be a
    package that exists or one that is planned (record/, nsq/nsqd/, grpc/)."""
    planned = {"tidemq.record", "tidemq.nsq.nsqd", "tidemq.grpc"}
    for rule in RULES:
        for name in (rule.package, *rule.forbids, *(rule.only or ())):
            path = SRC / name.removeprefix("tidemq.").replace(".", "/")
            assert name in planned or exists(name) or path.with_suffix(".py").is_file(), name
