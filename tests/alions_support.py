"""Running the ali-ons (Node.js) harness of interop/ali-ons from tests (see interop/ali-ons/NOTES.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support import ScriptRun, run_script

HARNESS = Path(__file__).resolve().parent.parent / "interop" / "ali-ons"
NODE = shutil.which("node")


def require_harness() -> None:
    """Skip the calling test module when Node or the harness is missing (``make test`` installs both)."""
    if NODE is None:
        pytest.skip("ali-ons interop: `node` is not on PATH", allow_module_level=True)
    if not (HARNESS / "node_modules" / "ali-ons" / "package.json").is_file():
        pytest.skip(
            f"ali-ons interop: {HARNESS / 'node_modules'} is missing "
            "(run `cd interop/ali-ons && npm ci --no-audit --no-fund`)",
            allow_module_level=True,
        )


QUEUES = 4
HARNESS_TIMEOUT = 40


def node(script: str, timeout: int = HARNESS_TIMEOUT, **options: object) -> ScriptRun:
    """Run a harness script to completion; ``fail_first=3`` becomes ``--fail-first 3``."""
    return run_script([str(NODE), script], timeout, cwd=HARNESS, **options)
