"""``tidemq console`` in front of real servers, in headless chromium: Apache RocketMQ 4.9.7 and 5.3.3 (a
name server and two masters, marker ``java_broker``) and nsqd + nsqlookupd v1.3.0 (marker ``real_nsq``).

The console is a client of the public protocols only, so each page must read what a Java broker answers
(runtime info, topic stats, consumer connections, version codes) and each action must be one the Java
broker carries out (INVOKE_BROKER_TO_RESET_OFFSET to an online consumer, a dead letter sent back).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from selenium.webdriver.common.by import By

from tests.console.conftest import (
    Console,
    Peers,
    accept_confirm,
    dead_letter_row,
    nsq_channel,
    nsq_stats,
    open_page,
    resend_dead_letter,
    reset_to_earliest,
    screenshot,
    settle,
    submit_create_topic,
    text,
)
from tests.consumer_support import Collector, consume_once, consumer
from tests.real_nsq_support import RealLookupd, RealNsqd, nsq_binaries
from tests.rocketmq_cluster import VERSIONS, JavaCluster, create_topic, java_cluster
from tests.support import eventually, run, unique
from tidemq.client.admin import Admin
from tidemq.client.consumer import ConsumeFromWhere, PushConsumer
from tidemq.client.message import Message, SendResult
from tidemq.client.producer import Producer
from tidemq.remoting.versions import version_name

T = TypeVar("T")


@pytest.fixture(scope="module", params=VERSIONS)
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JavaCluster]:
    yield from java_cluster(request.param, tmp_path_factory.mktemp(f"console-rocketmq-{request.param}"))


@pytest.fixture(scope="module")
def java_console(cluster: JavaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    # No NSQ here: nothing listens on port 1, the NSQ page says so.
    proc = Console(
        Peers(cluster.namesrv, "127.0.0.1:1", "127.0.0.1:1"),
        tmp_path_factory.mktemp("console") / "console.log",
    )
    yield proc
    proc.stop()


class Background:
    """An event loop on its own thread: a consumer stays online (heartbeats, the broker's reset) while
    the test thread drives the browser."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


async def send(namesrv: str, topic: str, bodies: list[bytes], keys: str | None = None) -> list[SendResult]:
    async with Producer(unique("ConsoleRealPG"), namesrv) as producer:
        return [await producer.send(Message(topic, body, keys=keys, tags="console")) for body in bodies]


@pytest.mark.e2e
@pytest.mark.java_broker
def test_overview_and_topics_on_a_real_cluster(
    cluster: JavaCluster, java_console: Console, browser: Any
) -> None:
    open_page(browser, java_console.url + "/", "#count-brokers b")
    assert text(browser, "#count-brokers b") == "2"
    brokers = text(browser, "#brokers tbody")
    assert "broker-a" in brokers and "broker-b" in brokers and "127.0.0.1" in brokers
    assert "V" + cluster.version.replace(".", "_") in brokers, brokers
    # GET_BROKER_RUNTIME_INFO's commitLogDiskRatio: a percentage, not "unknown".
    assert text(browser, "#count-disk b").endswith("%")
    screenshot(browser, f"real-{cluster.version}-overview")

    created = unique("ConsoleRealCreated")
    browser.get(java_console.url + "/topics")
    submit_create_topic(browser, "3", created)
    settle(browser, 20).until(lambda d: created in d.title)
    assert f"Created topic {created} with 3 queues" in text(browser, "#notice")
    # Three queues on each of the two masters.
    assert len(browser.find_elements(By.CSS_SELECTOR, "#queues tbody tr")) == 6
    assert "127.0.0.1" in text(browser, "#route-brokers")

    run(send(cluster.namesrv, created, [b"q%d" % i for i in range(5)]))
    browser.get(f"{java_console.url}/topics/{created}")
    assert text(browser, "#topic-total") == "5"
    browser.get(java_console.url + "/topics")
    assert created in text(browser, "#topic-list")
    screenshot(browser, f"real-{cluster.version}-topic")


@pytest.mark.e2e
@pytest.mark.java_broker
def test_group_lag_versions_and_reset_with_the_consumer_online(
    cluster: JavaCluster, java_console: Console, browser: Any
) -> None:
    topic, group = unique("ConsoleRealLag"), unique("ConsoleRealGroup")
    run(create_topic(cluster, topic, 2))
    run(send(cluster.namesrv, topic, [b"a%d" % i for i in range(6)]))
    bg = Background()
    got = Collector()
    c: PushConsumer = consumer(
        cluster.namesrv, group, topic, got, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    )
    try:
        bg.run(c.start())
        bg.run(eventually(lambda: len(got.distinct()) == 6, what="6 consumed", timeout=40.0))
        bg.run(c.drain())
        bg.run(c.shutdown())
        # The group is offline: 4 more are its lag.
        run(send(cluster.namesrv, topic, [b"b%d" % i for i in range(4)]))
        browser.get(f"{java_console.url}/groups/{group}")
        assert text(browser, "#total-lag") == "4"
        assert topic in text(browser, "#lag")

        # Online again, from where it stopped: the lag drains, the member row names its version.
        got2 = Collector()
        c = consumer(cluster.namesrv, group, topic, got2, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        bg.run(c.start())
        bg.run(eventually(lambda: len(got2.distinct()) == 4, what="4 more consumed", timeout=40.0))
        bg.run(c.drain())

        def member_online(driver: Any) -> bool:
            driver.get(f"{java_console.url}/groups/{group}")
            return "PYTHON" in text(driver, "#members tbody") or "JAVA" in text(driver, "#members tbody")

        settle(browser, 30, poll_frequency=1).until(member_online)
        members = text(browser, "#members tbody")
        assert version_name(409) in members, members
        screenshot(browser, f"real-{cluster.version}-group")

        # Reset to earliest while it is online: the Java broker tells the consumer, which consumes all 10
        # again.
        reset_to_earliest(browser, group)
        assert "to earliest: 4 queues" in text(browser, "#notice")
        bg.run(eventually(lambda: len(got2.distinct()) == 10, what="all 10 consumed again", timeout=40.0))
    finally:
        bg.run(c.shutdown())
        bg.close()


@pytest.mark.e2e
@pytest.mark.java_broker
def test_message_by_key_and_id_and_a_dead_letter_resent(
    cluster: JavaCluster, java_console: Console, browser: Any
) -> None:
    topic, key = unique("ConsoleRealMsgs"), unique("order")
    run(create_topic(cluster, topic, 2))
    (sent,) = run(send(cluster.namesrv, topic, [b'{"order": 7}'], keys=key))

    def found_by_key(driver: Any) -> bool:  # the Java broker builds its index asynchronously
        driver.get(f"{java_console.url}/messages?by=key&ktopic={topic}&key={key}")
        return bool(driver.find_elements(By.CSS_SELECTOR, "#results tbody tr"))

    settle(browser, 20, poll_frequency=1).until(found_by_key)
    rows = browser.find_elements(By.CSS_SELECTOR, "#results tbody tr")
    assert len(rows) == 1 and key in rows[0].text
    # The unique key a producer reports as msg_id, looked up in its topic's index.
    browser.get(f"{java_console.url}/messages?by=id&id={sent.msg_id}&itopic={topic}")
    assert key in text(browser, "#results tbody")
    # The offset message id the broker answered with: the broker's address and a commit-log offset.
    browser.get(f"{java_console.url}/messages?by=id&id={sent.offset_msg_id}")
    assert key in text(browser, "#results tbody")
    browser.find_element(By.CSS_SELECTOR, "#results tbody a").click()
    settle(browser, 20).until(lambda d: d.find_elements(By.ID, "properties"))
    assert key in text(browser, "#properties")
    assert '"order": 7' in text(browser, "#body-json")
    screenshot(browser, f"real-{cluster.version}-message")

    dlq_topic, group, dead_key = unique("ConsoleRealDlq"), unique("ConsoleRealDlqGroup"), unique("dead")
    run(create_topic(cluster, dlq_topic, 1))
    run(send(cluster.namesrv, dlq_topic, [b"poison"], keys=dead_key))
    # max_reconsume_times=0: the failed message goes straight to %DLQ%group.
    got = Collector(fail=lambda m: True)
    run(consume_once(cluster.namesrv, group, dlq_topic, got, 1, timeout=40.0, max_reconsume_times=0))
    row = dead_letter_row(browser, java_console.url, group)
    assert "poison" in row.text and dead_key in row.text
    screenshot(browser, f"real-{cluster.version}-dead-letters")
    resend_dead_letter(browser, row, group)

    async def resent() -> list[Any]:
        async with Admin(cluster.namesrv) as admin:
            return await admin.query(f"%RETRY%{group}", dead_key)

    async def wait_resent() -> list[Any]:
        found: list[Any] = []

        async def seen() -> bool:
            found[:] = await resent()
            return bool(found)

        await eventually(seen, what="resent message indexed", timeout=20.0)
        return found

    assert [m.body for m in run(wait_resent())] == [b"poison"]


@pytest.fixture(scope="module")
def real_nsq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RealNsqd, RealLookupd]]:
    nsq_binaries()
    lookupd = RealLookupd(tmp_path_factory.mktemp("console-lookupd") / "d")
    lookupd.start()
    nsqd = RealNsqd(tmp_path_factory.mktemp("console-nsqd") / "d", f"--lookupd-tcp-address={lookupd.tcp}")
    try:
        nsqd.start()
        yield nsqd, lookupd
    finally:
        nsqd.stop()
        lookupd.stop()


@pytest.mark.e2e
@pytest.mark.real_nsq
def test_nsq_page_on_real_nsqd_and_lookupd(
    real_nsq: tuple[RealNsqd, RealLookupd], browser: Any, tmp_path: Path
) -> None:
    nsqd, lookupd = real_nsq
    console = Console(
        Peers("127.0.0.1:1", nsqd.nsqd_http, lookupd.http),
        tmp_path / "console.log",
    )
    try:
        topic = unique("console_real_nsq")
        http = f"http://{nsqd.nsqd_http}"
        nsq_channel(http, topic)

        def registered(driver: Any) -> bool:  # nsqd tells lookupd of a new topic within a moment
            driver.get(console.url + "/nsq")
            return topic in text(driver, "#lookupd-nodes") or topic in driver.page_source

        settle(browser, 20, poll_frequency=1).until(registered)
        assert topic in text(browser, "#nsq-topics")
        row = next(
            r for r in browser.find_elements(By.CSS_SELECTOR, "#nsq-channels tbody tr") if topic in r.text
        )
        assert row.find_elements(By.TAG_NAME, "td")[2].text == "3"  # depth
        nodes = text(browser, "#lookupd-nodes")
        assert "127.0.0.1" in nodes and "1.3.0" in nodes, nodes
        screenshot(browser, "real-nsq")

        row.find_element(By.XPATH, ".//button[text()='Pause']").click()
        assert f"{topic}/ch" in accept_confirm(browser)
        settle(browser, 20).until(lambda d: "Paused channel" in d.page_source)
        assert nsq_stats(http, topic)[0]["channels"][0]["paused"] is True

        row = next(
            r for r in browser.find_elements(By.CSS_SELECTOR, "#nsq-channels tbody tr") if topic in r.text
        )
        assert "paused" in row.text
        row.find_element(By.XPATH, ".//button[text()='Unpause']").click()
        accept_confirm(browser)
        settle(browser, 20).until(lambda d: "Unpaused channel" in d.page_source)
        assert nsq_stats(http, topic)[0]["channels"][0]["paused"] is False
    finally:
        console.stop()
