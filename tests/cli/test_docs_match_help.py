"""The docs and ``tidemq --help`` agree: every ``tidemq ...`` command line written in README.md or docs/
names a command that exists and only options that command has, so a renamed flag cannot leave the docs
behind (issue 25: "``tidemq --help`` and each subcommand's help match the docs")."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from tidemq.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

#: A ``tidemq`` invocation in a code block line or an inline code span (not output such as "tidemq ready:").
_INVOCATION = re.compile(r"(?:^|[|`;]\s*|\$\s+)(tidemq\s+[a-z][a-z0-9-]*(?=\s|$)[^`|;#\n]*)")


def _command_lines(text: str) -> list[str]:
    lines: list[str] = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M):
        for line in block.splitlines():
            lines += [m.group(1) for m in _INVOCATION.finditer(line.split("  #")[0])]
    for span in re.findall(r"`(tidemq [a-z][a-z0-9-]*(?:\s[^`]*)?)`", text):
        lines.append(span)
    return [line.strip() for line in lines if not line.strip().startswith("tidemq quickstart")]


def _resolve(words: list[str]) -> tuple[click.Command, list[str]]:
    """The (sub)command the words name, and the words after it (an upper-case word is a placeholder, as in
    ``tidemq COMMAND --help``)."""
    command: click.Command = main
    rest = words[1:]
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-") and not rest[0].isupper():
        sub = command.get_command(click.Context(command), rest[0])
        assert sub is not None, f"no command {' '.join(words[: len(words) - len(rest) + 1])!r}"
        command, rest = sub, rest[1:]
    return command, rest


def _options(command: click.Command) -> set[str]:
    names = {"--help"}
    for param in command.params:
        if isinstance(param, click.Option):
            names.update(param.opts)
            names.update(param.secondary_opts)
    return names


def _invocations() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for line in _command_lines(doc.read_text()):
            found.append((f"{doc.relative_to(ROOT)}", line))
    return found


def test_the_docs_show_commands() -> None:
    """The scan itself works: the README's command lines are found (a broken regex would pass vacuously)."""
    readme = [line for doc, line in _invocations() if doc == "README.md"]
    assert any(line.startswith("tidemq server") for line in readme)
    assert any(line.startswith("tidemq topic create") for line in readme)


@pytest.mark.parametrize(("doc", "line"), _invocations())
def test_every_documented_command_and_option_exists(doc: str, line: str) -> None:
    try:
        words = shlex.split(line.replace("...", ""))
    except ValueError:
        words = line.split()
    command, rest = _resolve(words)
    known = _options(command)
    for word in rest:
        if word.startswith("--"):
            flag = word.split("=", 1)[0]
            assert flag in known, f"{doc}: `{line}`: `tidemq {command.name}` has no option {flag}"
