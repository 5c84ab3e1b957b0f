"""The metrics a user reads about and the dashboard they import name families the server serves."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.ops.test_metrics_e2e import FAMILIES

DOCS = Path(__file__).parents[2] / "docs"
SUFFIXES = ("_total", "_bucket", "_sum", "_count")


def _family(sample: str) -> str:
    for suffix in SUFFIXES:
        if sample.endswith(suffix) and sample.removesuffix(suffix) in FAMILIES:
            return sample.removesuffix(suffix)
    return sample


def test_operations_md_lists_every_family() -> None:
    text = (DOCS / "operations.md").read_text()
    documented = {_family(name) for name in re.findall(r"`((?:rocketmq|nsq|tidemq|process)_[a-z_]+)`", text)}
    assert set(FAMILIES) - documented == set()


def test_the_dashboard_queries_only_served_families() -> None:
    dashboard = json.loads((DOCS / "grafana-tidemq.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    names = {_family(n) for e in exprs for n in re.findall(r"\b((?:rocketmq|nsq|tidemq|process)_[a-z_]+)", e)}
    assert names and names <= set(FAMILIES), names - set(FAMILIES)
