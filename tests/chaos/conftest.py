"""The chaos suite: every test here is marked ``chaos``. ``make test`` runs the short version (a few SIGKILL
rounds); ``make chaos`` sets TIDEMQ_CHAOS=long (100 rounds) and writes the table into docs/reliability.md."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.chaos_support import LONG, ROWS, Row

DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
START, END = "<!-- chaos-table:start -->", "<!-- chaos-table:end -->"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).parent == here:
            item.add_marker(pytest.mark.chaos)


def table(rows: list[Row], label: str) -> str:
    lines = [
        label,
        "",
        "| scenario | acknowledged | lost | duplicates | stalls | peak server RSS (MB) | note |",
        "|---|---:|---:|---:|---|---:|---|",
    ]
    lines += [
        f"| {r.scenario} | {r.acknowledged} | {r.lost} | {r.duplicates} | {r.stalls} | "
        f"{r.peak_rss_mb:.0f} | {r.note} |"
        for r in rows
    ]
    return "\n".join(lines)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not ROWS:
        return
    label = "long run (`make chaos`)" if LONG else "short run (`make test`)"
    text = table(ROWS, f"Chaos suite, {label}:")
    terminalreporter.write_line("")
    for line in text.splitlines():
        terminalreporter.write_line(line)
    if LONG and DOC.exists():
        doc = DOC.read_text()
        block = f"{START}\n{text}\n{END}"
        DOC.write_text(re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: block, doc, flags=re.S))
