"""The console's browser-test harness: a real ``tidemq server``, ``tidemq console`` in front of it, and
Debian's headless chromium driven through Selenium and /usr/bin/chromedriver (no browser download)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from tests.support import ServerProcess, free_port, wait_listening

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
#: Screenshots per page, git-ignored; the docs pick a few.
ARTIFACTS = Path(__file__).resolve().parents[2] / ".artifacts" / "console"
#: Without these, chromium on this closed network stalls on its own background connections.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
)


class Endpoints(Protocol):
    """What ``Console`` reads of a server: the name server and the NSQ HTTP addresses."""

    @property
    def namesrv(self) -> str: ...
    @property
    def nsqd_http(self) -> str: ...
    @property
    def lookupd_http(self) -> str: ...


@dataclass(frozen=True)
class Peers:
    """Endpoints spelled out, for a console in front of servers that are not one ``tidemq server``."""

    namesrv: str
    nsqd_http: str
    lookupd_http: str


class Console:
    """``tidemq console`` as a child process, stopped by its own PID."""

    def __init__(self, server: Endpoints, log_path: Path, *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [
            sys.executable, "-m", "tidemq", "console", "--namesrv", server.namesrv,
            "--nsqd-http", server.nsqd_http, "--lookupd-http", server.lookupd_http,
            "--port", str(self.port), "--sample-seconds", "0.5", *extra,
        ]  # fmt: skip
        self.log = open(log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=self.log)
        if not wait_listening(self.port, lambda: self.proc.poll() is None, 20):
            self.stop()
            raise RuntimeError(f"console did not start: {log_path.read_text(errors='replace')[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.log.close()


@pytest.fixture(scope="module")
def console(server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    proc = Console(server, tmp_path_factory.mktemp("console") / "console.log")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.fail("chromium and chromium-driver are not installed (make's chromium stamp installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def screenshot(driver: object, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))  # type: ignore[attr-defined]


#: How chromium (156 at least) words a stale element when the page was replaced between finding it and
#: reading it: a plain "unknown error", not Selenium's ``StaleElementReferenceException``.
DETACHED_NODE = "does not belong to the document"


class _Settle(WebDriverWait[Any]):
    """A wait whose condition is simply tried again when the element it read went stale."""

    def until(self, method: Any, message: str = "") -> Any:
        def tolerant(driver: Any) -> Any:
            try:
                return method(driver)
            except WebDriverException as error:
                if DETACHED_NODE not in (error.msg or ""):
                    raise
                return False

        return super().until(tolerant, message)


def settle(driver: Any, timeout: float = 20, poll_frequency: float = 0.5) -> WebDriverWait[Any]:
    """A wait that rides out a page being replaced under it (an element found a moment before the reload
    goes stale): the condition is simply tried again."""
    return _Settle(
        driver, timeout, poll_frequency=poll_frequency, ignored_exceptions=(StaleElementReferenceException,)
    )


def open_page(driver: Any, url: str, css: str, timeout: float = 45) -> None:
    """Load ``url`` until it shows ``css``, as a user reloads a page that a just-started, busy Java broker
    answered too late (the console's error page names the request that failed, which the failure shows)."""
    deadline = time.monotonic() + timeout
    while True:
        driver.get(url)
        if driver.find_elements(By.CSS_SELECTOR, css):
            return
        if time.monotonic() > deadline:
            shown = driver.find_element(By.TAG_NAME, "body").text
            raise AssertionError(f"{url} never showed {css}; the page said:\n{shown[:2000]}")
        time.sleep(1)


def text(driver: Any, css: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def accept_confirm(driver: Any) -> str:
    """Accept the page's confirm() dialog; what it asked."""
    alert = settle(driver, 10).until(expected_conditions.alert_is_present())
    asked = str(alert.text)
    alert.accept()
    return asked


def submit_create_topic(driver: Any, queues: str, name: str = "") -> str:
    """Type into the topics page's create form and submit it; what its confirm() asked. The name is typed
    only when given: a form sent back with an error still holds it."""
    if name:
        driver.find_element(By.ID, "topic-name").send_keys(name)
    box = driver.find_element(By.ID, "topic-queues")
    box.clear()
    box.send_keys(queues)
    driver.find_element(By.ID, "create-topic-submit").click()
    return accept_confirm(driver)


def reset_to_earliest(driver: Any, group: str) -> None:
    """Submit the group page's reset form (for the topic selected) to the earliest offsets, confirm it
    names the group, and wait for the answer's notice."""
    driver.find_element(By.CSS_SELECTOR, "#reset-offset input[value=earliest]").click()
    driver.find_element(By.ID, "reset-submit").click()
    assert group in accept_confirm(driver)
    settle(driver, 20).until(lambda d: d.find_elements(By.ID, "notice"))


def dead_letter_row(driver: Any, console_url: str, group: str) -> Any:
    """The group's first dead letter on the DLQ page, reloaded until one is listed (a broker writes it
    after the last failed retry, a moment after the consumer answered)."""
    open_page(driver, f"{console_url}/dlq?group={group}", "#dead-letters tbody tr", timeout=30)
    return driver.find_element(By.CSS_SELECTOR, "#dead-letters tbody tr")


def resend_dead_letter(driver: Any, row: Any, group: str) -> None:
    """Press the row's resend button, confirm it names the group, and wait for the page to say so."""
    row.find_element(By.CSS_SELECTOR, "button").click()
    assert group in accept_confirm(driver)
    settle(driver, 20).until(lambda d: "Resent " in d.page_source)


def nsq_channel(http: str, topic: str, messages: int = 3, paused: bool = False) -> None:
    """``topic`` with channel ``ch`` holding ``messages`` messages (m0, m1, ...), made through nsqd's HTTP
    API at ``http`` (``http://host:port``)."""
    paths = [f"/topic/create?topic={topic}", f"/channel/create?topic={topic}&channel=ch"]
    if paused:
        paths.append(f"/channel/pause?topic={topic}&channel=ch")
    for path in paths:
        urllib.request.urlopen(urllib.request.Request(http + path, method="POST"))
    for i in range(messages):
        urllib.request.urlopen(urllib.request.Request(f"{http}/pub?topic={topic}", data=b"m%d" % i))


def nsq_stats(http: str, topic: str) -> list[dict[str, Any]]:
    """nsqd's stats of ``topic``: one entry, or none once it is deleted."""
    with urllib.request.urlopen(f"{http}/stats?format=json&topic={topic}") as resp:
        # nsqd answers null, not [], when no topic matches (a Go nil slice).
        topics: list[dict[str, Any]] = json.load(resp)["topics"] or []
    return [t for t in topics if t["topic_name"] == topic]
