"""The overview when one broker of two hangs (SIGSTOP: its connection stays open, it answers nothing):
the page is the one an operator opens when something is wrong, so it shows the broker that answers and
says which one did not, instead of an error page."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.console.conftest import Console, Peers, open_page, text
from tests.support import TwoBrokers


@pytest.fixture
def cluster_console(two_brokers: TwoBrokers, tmp_path: Path) -> Iterator[Console]:
    # No NSQ here: nothing listens on port 1.
    console = Console(
        Peers(two_brokers.namesrv.namesrv, "127.0.0.1:1", "127.0.0.1:1"), tmp_path / "console.log"
    )
    yield console
    console.stop()


@pytest.mark.e2e
def test_the_overview_shows_the_answering_broker_and_names_the_hung_one(
    two_brokers: TwoBrokers, cluster_console: Console, browser: Any
) -> None:
    url = cluster_console.url + "/"
    open_page(browser, url, "#count-brokers b")
    assert text(browser, "#count-brokers b") == "2"
    hung = two_brokers.brokers[1].proc
    assert hung is not None
    os.kill(hung.pid, signal.SIGSTOP)
    try:
        browser.get(url)
        assert text(browser, "#count-brokers b") == "2"
        rows = {row.split()[0]: row for row in text(browser, "#brokers tbody").splitlines()}
        assert "no answer" in rows["broker-1"], rows
        assert "no answer" not in rows["broker-0"] and "%" in rows["broker-0"], rows
        # Groups live on the brokers: with one silent the count is unknown, not a wrong number.
        assert text(browser, "#count-groups b") == "?"
    finally:
        os.kill(hung.pid, signal.SIGCONT)
    open_page(browser, url, "#count-groups b")
    assert text(browser, "#count-groups b") != "?"
