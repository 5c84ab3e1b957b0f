"""create_console_app from settings alone, as ``tidemq server --http-port`` mounts it: in-process, no
cluster behind it (every page is behind the login gate here, so none asks one)."""

from __future__ import annotations

from urllib.parse import unquote

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.support import free_port
from tidemq.console import ConsoleSettings, create_console_app


async def metrics(request: web.Request) -> web.Response:
    return web.Response(text="rocketmq_up 1\n")


async def test_console_as_root_app_with_metrics_outside_the_gate() -> None:
    settings = ConsoleSettings(f"127.0.0.1:{free_port()}", acl=True, sample_seconds=60.0)
    app = create_console_app(settings)
    app.router.add_get("/metrics", metrics)
    async with TestClient(TestServer(app)) as client:
        scraped = await client.get("/metrics")
        assert scraped.status == 200 and await scraped.text() == "rocketmq_up 1\n"
        assert "tidemq_console" not in scraped.cookies  # a scraper gets no session

        page = await client.get("/topics", allow_redirects=False)
        assert page.status == 303 and unquote(page.headers["Location"]) == "/login?next=/topics"
        cookie = page.cookies["tidemq_console"]
        assert cookie["httponly"] and cookie["samesite"] == "Strict"

        form = await client.get("/login")
        assert form.status == 200 and 'name=_csrf value="' in await form.text()

        # Not logged in: a POST goes to the login form too, before its CSRF token is looked at.
        posted = await client.post("/topics", data={"topic": "T"}, allow_redirects=False)
        assert posted.status == 303
        blank = await client.post("/login", data={"access_key": "", "secret_key": ""})
        assert blank.status == 400 and "enter both" in await blank.text()
        offsite = await client.get("/login?next=//evil.example/")
        assert 'name=next value="/"' in await offsite.text()
