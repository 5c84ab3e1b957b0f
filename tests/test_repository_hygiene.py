"""No merge leftovers in what the project ships: a conflict marker once sat in docs/performance.md for a
whole session, read by users and unnoticed by every other test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: What the repository ships, by hand-written text: downloads and builds (.cache, var, node_modules,
#: target) stay out.
FOLDERS = ("src", "tests", "docs", "benchmarks", "interop", ".ci")
TEXT = {".md", ".py", ".toml", ".cfg", ".txt", ".json", ".yml", ".yaml", ".sh", ".go", ".java", ".js"}
SKIP = {"node_modules", "target", "__pycache__", "var", "home"}


def _shipped() -> Iterator[Path]:
    yield from (p for p in ROOT.iterdir() if p.is_file() and (p.suffix in TEXT or p.name == "Makefile"))
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in TEXT and path.is_file() and not SKIP & set(path.relative_to(ROOT).parts):
                yield path


def test_no_shipped_file_holds_a_merge_conflict_marker() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line}"
        for path in _shipped()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if line.startswith(("<<<<<<< ", ">>>>>>> "))
    ]
    assert not found, "merge conflict markers:\n" + "\n".join(found)
