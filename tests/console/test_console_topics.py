"""The overview and topics pages in headless chromium, against a real server with data."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from tests.console.conftest import Console, accept_confirm, screenshot, settle, submit_create_topic, text
from tests.consumer_support import produce
from tests.support import ServerProcess, create_topic, run, unique

pytestmark = pytest.mark.e2e


def test_overview_counts_brokers_topics_and_charts_tps(
    server: ServerProcess, console: Console, browser: Any
) -> None:
    topic = unique("ConsoleOverview")
    run(create_topic(server.broker, topic, 2, routed_by=server.namesrv))
    run(produce(server.namesrv, topic, 30))
    browser.get(console.url + "/")
    assert "Overview" in browser.title
    assert text(browser, "#count-brokers b") == "1"
    assert int(text(browser, "#count-topics b")) >= 1
    assert text(browser, "#count-commit-log b") != "0 B"
    # The disk figure is the broker's commitLogDiskRatio: the used share of the data dir's partition.
    usage = shutil.disk_usage(server.data_dir)
    shown = float(text(browser, "#count-disk b").rstrip("%"))
    assert abs(shown - 100 * (usage.total - usage.free) / usage.total) < 2.0, shown
    assert "broker" in text(browser, "#brokers tbody")

    def tps_seen(driver: Any) -> bool:
        """A peak above zero, drawn as a line (a line needs two rates, so three samples)."""
        driver.refresh()
        legend = driver.find_element(By.CSS_SELECTOR, "#tps-chart text.legend")
        drawn = driver.find_elements(By.CSS_SELECTOR, "#tps-chart polyline")
        return float(legend.get_attribute("data-peak")) > 0 and bool(drawn)

    settle(browser, 30, poll_frequency=1).until(tps_seen)
    screenshot(browser, "overview")


def test_topics_search_create_detail_and_delete(
    server: ServerProcess, console: Console, browser: Any
) -> None:
    existing = unique("ConsoleListed")
    run(create_topic(server.broker, existing, 2, routed_by=server.namesrv))
    run(produce(server.namesrv, existing, 5))
    browser.get(console.url + "/topics")
    assert existing in text(browser, "#topic-list")
    browser.find_element(By.ID, "topic-search").send_keys("no-such-topic-name")
    visible = [r for r in browser.find_elements(By.CSS_SELECTOR, "#topic-list tbody tr") if r.is_displayed()]
    assert visible == []
    screenshot(browser, "topics")

    # A bad queue count: the form comes back with the error and what was typed.
    created = unique("ConsoleCreated")
    browser.get(console.url + "/topics")
    submit_create_topic(browser, "lots", created)
    assert "not a whole number" in text(browser, "#form-error")
    assert browser.find_element(By.ID, "topic-name").get_attribute("value") == created

    assert "Create this topic?" in submit_create_topic(browser, "3")
    settle(browser, 20).until(lambda d: created in d.title)
    assert f"Created topic {created} with 3 queues" in text(browser, "#notice")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#queues tbody tr")) == 3
    assert "127.0.0.1" in text(browser, "#route-brokers")

    browser.get(f"{console.url}/topics/{existing}")
    assert text(browser, "#topic-total") == "5"
    screenshot(browser, "topic-detail")

    browser.get(f"{console.url}/topics/{created}")
    browser.find_element(By.CSS_SELECTOR, "form[data-confirm] button").click()
    assert created in accept_confirm(browser)
    settle(browser, 20).until(lambda d: "Deleted topic" in d.page_source)
    assert created not in text(browser, "#topic-list")


def test_unknown_topic_is_a_404_naming_it(console: Console, browser: Any) -> None:
    browser.get(console.url + "/topics/NoSuchConsoleTopic")
    assert "NoSuchConsoleTopic" in text(browser, "#not-found")
    assert "Traceback" not in browser.page_source
