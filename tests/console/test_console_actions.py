"""The console's remaining actions in headless chromium: reset with a consumer online, message search by
either id, and NSQ unpause, empty and delete."""

from __future__ import annotations

from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from tests.console.conftest import (
    Console,
    accept_confirm,
    nsq_channel,
    nsq_stats,
    reset_to_earliest,
    screenshot,
    settle,
    text,
)
from tests.consumer_support import Collector, caught_up, produce
from tests.support import ServerProcess, create_topic, eventually, run, unique
from tidemq.client.message import Message, SendResult
from tidemq.client.producer import Producer

pytestmark = pytest.mark.e2e


def test_reset_to_earliest_with_a_consumer_online(
    server: ServerProcess, console: Console, browser: Any
) -> None:
    topic, group = unique("ConsoleResetOnline"), unique("ConsoleResetOnlineGroup")
    run(create_topic(server.broker, topic, 2, routed_by=server.namesrv))
    run(produce(server.namesrv, topic, 5))

    async def scenario() -> None:
        got = Collector()
        async with caught_up(server.namesrv, group, topic, got, 5):
            seen = len(got.bodies)
            browser.get(f"{console.url}/groups/{group}")
            Select(browser.find_element(By.ID, "reset-topic")).select_by_value(topic)
            reset_to_earliest(browser, group)
            assert "to earliest: 2 queues" in text(browser, "#notice")
            screenshot(browser, "group-reset-online")
            # The running consumer was told (RESET_CONSUMER_CLIENT_OFFSET) and reads all five again.
            await eventually(lambda: len(got.bodies) >= seen + 5, what="5 consumed again", timeout=30.0)
            assert sorted(got.bodies[seen : seen + 5]) == sorted(b"m%d" % i for i in range(5))

    run(scenario())


def test_message_by_producer_msg_id_and_offset_msg_id(
    server: ServerProcess, console: Console, browser: Any
) -> None:
    topic = unique("ConsoleById")
    run(create_topic(server.broker, topic, 2, routed_by=server.namesrv))

    async def send() -> SendResult:
        async with Producer(unique("ConsoleByIdPG"), server.namesrv) as producer:
            return await producer.send(Message(topic, b"found by id"))

    sent = run(send())

    def search(msg_id: str, topic_of_key: str = "") -> None:
        browser.get(console.url + "/messages")
        if topic_of_key:
            browser.find_element(By.ID, "q-itopic").send_keys(topic_of_key)
        browser.find_element(By.ID, "q-id").send_keys(msg_id)
        browser.find_element(By.ID, "search-id").click()
        settle(browser, 20).until(
            lambda d: d.find_elements(By.ID, "results") or d.find_elements(By.ID, "form-error")
        )

    search(sent.offset_msg_id)
    rows = browser.find_elements(By.CSS_SELECTOR, "#results tbody tr")
    assert len(rows) == 1 and sent.msg_id in rows[0].text
    search(sent.msg_id, topic)
    rows = browser.find_elements(By.CSS_SELECTOR, "#results tbody tr")
    assert len(rows) == 1 and sent.msg_id in rows[0].text
    rows[0].find_element(By.CSS_SELECTOR, "a").click()
    settle(browser, 20).until(lambda d: d.find_elements(By.ID, "body-text"))
    assert text(browser, "#body-text") == "found by id"
    # The producer's id alone cannot be located: the form says to give the topic.
    search(sent.msg_id)
    assert "give its topic" in text(browser, "#form-error")


def _click(browser: Any, table: str, topic: str, label: str) -> None:
    row = next(r for r in browser.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr") if topic in r.text)
    row.find_element(By.XPATH, f".//button[text()='{label}']").click()
    assert topic in accept_confirm(browser)
    settle(browser, 20).until(lambda d: d.find_elements(By.ID, "notice"))


def test_nsq_unpause_empty_and_delete(server: ServerProcess, console: Console, browser: Any) -> None:
    topic = unique("console_nsq_ops")
    http = f"http://{server.nsqd_http}"
    nsq_channel(http, topic, paused=True)
    browser.get(console.url + "/nsq")

    _click(browser, "nsq-channels", topic, "Unpause")
    assert f"Unpaused channel {topic}/ch" in text(browser, "#notice")
    assert nsq_stats(http, topic)[0]["channels"][0]["paused"] is False

    _click(browser, "nsq-channels", topic, "Empty")
    assert f"Emptied channel {topic}/ch" in text(browser, "#notice")
    assert nsq_stats(http, topic)[0]["channels"][0]["depth"] == 0

    _click(browser, "nsq-channels", topic, "Delete")
    assert f"Deleted channel {topic}/ch" in text(browser, "#notice")
    assert nsq_stats(http, topic)[0]["channels"] == []
    screenshot(browser, "nsq-actions")

    _click(browser, "nsq-topics", topic, "Delete")
    assert f"Deleted topic {topic}" in text(browser, "#notice")
    assert nsq_stats(http, topic) == []
