"""The ACL login gate and CSRF tokens in headless chromium, against ``tidemq server --acl-file``."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from tests.console.conftest import Console, screenshot, settle, text
from tests.support import ServerProcess, run, unique
from tidemq.client.admin import Admin

pytestmark = pytest.mark.e2e

ACL = """\
accounts:
  - accessKey: console-admin
    secretKey: admin-secret-1
    admin: true
  - accessKey: plain-user
    secretKey: user-secret-1
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("console-acl")
    (folder / "plain_acl.yml").write_text(ACL)
    proc = ServerProcess(folder / "data", "--acl-file", str(folder / "plain_acl.yml")).start()
    yield proc
    proc.stop()


def _console(server: ServerProcess, tmp: pytest.TempPathFactory, *extra: str) -> Iterator[Console]:
    proc = Console(server, tmp.mktemp("console") / "console.log", *extra)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def detecting_console(
    acl_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Console]:
    """No --acl: the console learns ACL is on from the broker's NO_PERMISSION."""
    yield from _console(acl_server, tmp_path_factory)


@pytest.fixture(scope="module")
def flagged_console(acl_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    yield from _console(acl_server, tmp_path_factory, "--acl")


def log_in(browser: Any, access_key: str, secret_key: str) -> None:
    browser.find_element(By.ID, "access-key").clear()
    browser.find_element(By.ID, "access-key").send_keys(access_key)
    browser.find_element(By.ID, "secret-key").send_keys(secret_key)
    browser.find_element(By.ID, "login-submit").click()


def shows_error(browser: Any, words: str) -> None:
    """The refusal (waiting out the form's reload: the previous page may show an older error)."""
    settle(browser, 20).until(
        lambda d: words in " ".join(e.text for e in d.find_elements(By.ID, "form-error"))
    )


@pytest.mark.parametrize("which", ["detecting_console", "flagged_console"])
def test_login_gate(
    acl_server: ServerProcess, browser: Any, which: str, request: pytest.FixtureRequest
) -> None:
    console: Console = request.getfixturevalue(which)
    topic = unique("ConsoleAcl")

    async def create() -> None:
        async with Admin(acl_server.namesrv, credentials=("console-admin", "admin-secret-1")) as admin:
            await admin.create_topic(topic, 2)

    run(create())
    browser.delete_all_cookies()
    browser.get(console.url + "/topics")
    assert browser.current_url.startswith(console.url + "/login"), browser.current_url
    screenshot(browser, "login")

    log_in(browser, "console-admin", "not-the-secret")
    shows_error(browser, "Check signature failed")
    screenshot(browser, "login-refused")
    log_in(browser, "plain-user", "user-secret-1")
    shows_error(browser, "Need admin permission")
    log_in(browser, "console-admin", "admin-secret-1")
    # Back where the login started, with the admin's signed calls.
    settle(browser, 20).until(lambda d: d.current_url == console.url + "/topics")
    assert topic in text(browser, "#topic-list")
    assert text(browser, "#user") == "console-admin"
    cookie = browser.get_cookie("tidemq_console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"

    browser.find_element(By.ID, "logout").click()
    settle(browser, 20).until(lambda d: "/login" in d.current_url)
    browser.get(console.url + "/topics")
    assert browser.current_url.startswith(console.url + "/login")


def test_post_without_csrf_token_is_refused(server: ServerProcess, console: Console) -> None:
    """A form posted from elsewhere (no session token) changes nothing."""
    topic = unique("ConsoleCsrf")
    form = f"topic={topic}&queues=2".encode()
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(console.url + "/topics", data=form))
    assert refused.value.code == 403

    async def topics() -> list[str]:
        async with Admin(server.namesrv) as admin:
            return await admin.topic_list()

    assert topic not in run(topics())
