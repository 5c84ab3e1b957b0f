"""Consumer groups, messages, dead letters and NSQ pages in headless chromium, against a real server."""

from __future__ import annotations

from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from tests.console.conftest import (
    Console,
    accept_confirm,
    dead_letter_row,
    nsq_channel,
    nsq_stats,
    resend_dead_letter,
    reset_to_earliest,
    screenshot,
    settle,
    text,
)
from tests.consumer_support import Collector, caught_up, consume_once
from tests.support import ServerProcess, create_topic, run, unique
from tidemq.client.admin import Admin
from tidemq.client.message import Message
from tidemq.client.producer import Producer
from tidemq.record import Prop

pytestmark = pytest.mark.e2e


async def send(namesrv: str, topic: str, bodies: list[bytes], keys: str | None = None) -> None:
    async with Producer(unique("ConsolePG"), namesrv) as producer:
        for body in bodies:
            await producer.send(Message(topic, body, keys=keys, tags="console"))


def test_group_members_lag_reset_and_delete(server: ServerProcess, console: Console, browser: Any) -> None:
    topic, group = unique("ConsoleLag"), unique("ConsoleLagGroup")
    run(create_topic(server.broker, topic, 2, routed_by=server.namesrv))
    run(send(server.namesrv, topic, [b"a%d" % i for i in range(6)]))

    async def consume_while_looking() -> None:
        async with caught_up(server.namesrv, group, topic, Collector(), 6):
            # The member is online now: its row names its client id and version.
            browser.get(f"{console.url}/groups/{group}")
            members = text(browser, "#members tbody")
            assert "PYTHON" in members or "JAVA" in members, members
            screenshot(browser, "group-online")

    run(consume_while_looking())
    run(send(server.namesrv, topic, [b"b%d" % i for i in range(4)]))
    browser.get(f"{console.url}/groups/{group}")
    assert text(browser, "#total-lag") == "4"
    assert topic in text(browser, "#lag")
    screenshot(browser, "group")

    # A bad time: the form again with the error.
    browser.find_element(By.CSS_SELECTOR, "#reset-offset input[value=time]").click()
    browser.find_element(By.ID, "reset-at").send_keys("yesterday-ish")
    browser.find_element(By.ID, "reset-submit").click()
    accept_confirm(browser)
    assert "not a date and time" in text(browser, "#form-error")

    Select(browser.find_element(By.ID, "reset-topic")).select_by_value(topic)
    reset_to_earliest(browser, group)
    assert "to earliest: 2 queues" in text(browser, "#notice")
    assert text(browser, "#total-lag") == "10"

    browser.find_element(By.CSS_SELECTOR, "form[action$='/delete'] button").click()
    accept_confirm(browser)
    settle(browser, 20).until(lambda d: "Deleted group" in d.page_source)
    browser.get(f"{console.url}/groups/{group}")
    assert group in text(browser, "#not-found")


def test_messages_by_key_time_and_id(server: ServerProcess, console: Console, browser: Any) -> None:
    topic, key = unique("ConsoleMsgs"), unique("order")
    run(create_topic(server.broker, topic, 2, routed_by=server.namesrv))
    run(send(server.namesrv, topic, [b'{"order": 7, "item": "tea"}'], keys=key))
    run(send(server.namesrv, topic, [b"other"]))

    browser.get(console.url + "/messages")
    browser.find_element(By.ID, "q-ktopic").send_keys(topic)
    browser.find_element(By.ID, "q-key").send_keys(key)
    browser.find_element(By.ID, "search-key").click()
    settle(browser, 20).until(lambda d: d.find_elements(By.ID, "results"))
    rows = browser.find_elements(By.CSS_SELECTOR, "#results tbody tr")
    assert len(rows) == 1 and key in rows[0].text
    screenshot(browser, "messages")

    rows[0].find_element(By.CSS_SELECTOR, "a").click()
    settle(browser, 20).until(lambda d: d.find_elements(By.ID, "properties"))
    assert key in text(browser, "#properties")
    assert '"item": "tea"' in text(browser, "#body-json")
    assert text(browser, "#body-hex").startswith("7b 22")
    screenshot(browser, "message")

    browser.get(console.url + "/messages")
    browser.find_element(By.ID, "q-topic").send_keys(topic)
    browser.find_element(By.ID, "search-time").click()
    settle(browser, 20).until(lambda d: d.find_elements(By.ID, "results"))
    assert len(browser.find_elements(By.CSS_SELECTOR, "#results tbody tr")) == 2

    browser.get(console.url + "/messages?by=time&topic=NoSuchConsoleTopic")
    assert "NoSuchConsoleTopic" in text(browser, "#not-found")
    browser.get(console.url + "/messages?by=time&topic=bad%20name!")
    assert "may hold only" in text(browser, "#form-error")


def test_dead_letter_is_listed_and_resent(server: ServerProcess, console: Console, browser: Any) -> None:
    topic, group, key = unique("ConsoleDlq"), unique("ConsoleDlqGroup"), unique("dead")
    run(create_topic(server.broker, topic, 1, routed_by=server.namesrv))
    run(send(server.namesrv, topic, [b"poison"], keys=key))
    # max_reconsume_times=0: the failed message goes straight to %DLQ%group.
    run(consume_once(server.namesrv, group, topic, Collector(fail=lambda m: True), 1, max_reconsume_times=0))
    row = dead_letter_row(browser, console.url, group)
    assert "poison" in row.text and key in row.text
    screenshot(browser, "dead-letters")
    resend_dead_letter(browser, row, group)
    assert f"to {group}" in text(browser, "#notice")

    async def resent() -> list[Any]:
        async with Admin(server.namesrv) as admin:
            return await admin.query(f"%RETRY%{group}", key)

    found = run(resent())
    assert [m.body for m in found] == [b"poison"]
    assert found[0].properties[Prop.RETRY_TOPIC] == topic


def test_nsq_topics_channels_pause_and_lookupd(server: ServerProcess, console: Console, browser: Any) -> None:
    topic = unique("console_nsq")
    http = f"http://{server.nsqd_http}"
    nsq_channel(http, topic)
    browser.get(console.url + "/nsq")
    assert topic in text(browser, "#nsq-topics")
    row = next(r for r in browser.find_elements(By.CSS_SELECTOR, "#nsq-channels tbody tr") if topic in r.text)
    assert row.find_elements(By.TAG_NAME, "td")[2].text == "3"  # depth
    assert browser.find_elements(By.ID, "lookupd-nodes")
    screenshot(browser, "nsq")

    row.find_element(By.XPATH, ".//button[text()='Pause']").click()
    assert f"{topic}/ch" in accept_confirm(browser)
    settle(browser, 20).until(lambda d: "Paused channel" in d.page_source)
    row = next(r for r in browser.find_elements(By.CSS_SELECTOR, "#nsq-channels tbody tr") if topic in r.text)
    assert "paused" in row.text
    assert nsq_stats(http, topic)[0]["channels"][0]["paused"] is True


def test_unknown_group_is_a_404_and_nothing_shows_a_traceback(console: Console, browser: Any) -> None:
    browser.get(console.url + "/groups/NoSuchConsoleGroup")
    assert "NoSuchConsoleGroup" in text(browser, "#not-found")
    browser.get(console.url + "/messages/view?id=0A0000010000000000000000DEADBEEF")
    assert "Traceback" not in browser.page_source
    for path in ("/groups", "/dlq", "/nsq"):
        browser.get(console.url + path)
        assert "Traceback" not in browser.page_source and browser.find_elements(By.TAG_NAME, "h1")
    screenshot(browser, "groups")
