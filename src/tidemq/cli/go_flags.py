"""nsqd's and nsqlookupd's own flag spellings on ``tidemq nsqd`` and ``tidemq nsqlookupd``, so a start
script written for the Go binaries runs unchanged: Go's ``flag`` package takes ``-name value``,
``-name=value`` and ``--name`` alike, a few flags are named differently here (``--data-path`` is our
``--data-dir``), and ``--log-level`` belongs to the command rather than to ``tidemq``."""

from __future__ import annotations

import logging
from typing import ClassVar

import click

#: nsqd's level names (nsqd/lg: debug, info, warn, error, fatal) to logging's.
_LOG_LEVELS = {"debug": "DEBUG", "info": "INFO", "warn": "WARNING", "error": "ERROR", "fatal": "CRITICAL"}


class GoFlagsCommand(click.Command):
    """A command that reads its arguments the way a Go binary's ``flag`` package does."""

    #: nsqd's spelling -> ours, where the two differ.
    aliases: ClassVar[dict[str, str]] = {
        "--data-path": "--data-dir",
        "--max-bytes-per-file": "--segment-size",
    }

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        long_names = {opt for param in self.params for opt in (*param.opts, *param.secondary_opts)}
        rewritten: list[str] = []
        words = iter(args)
        for word in words:
            name, eq, value = word.partition("=")
            if name.startswith("-") and not name.startswith("--") and len(name) > 2:
                name = "-" + name  # Go's single-dash long flag
            name = self.aliases.get(name, name)
            if name == "--log-level":
                level = value if eq else next(words, "")
                self._log_level(level)
                continue
            if name in long_names or name in self.aliases.values():
                rewritten.append(name + eq + value)
            else:
                rewritten.append(word)
        return super().parse_args(ctx, rewritten)

    @staticmethod
    def _log_level(level: str) -> None:
        name = _LOG_LEVELS.get(level.lower())
        if name is None:
            raise click.BadParameter(
                f"{level!r} is not one of {', '.join(_LOG_LEVELS)}", param_hint="--log-level"
            )
        logging.getLogger().setLevel(name)
