"""The aiohttp application: routes, the admin client's lifetime, the TPS sampler and the error pages.

Bad input never shows a traceback: an unknown topic or group is a 404 page naming it (:class:`NotFound`),
anything unexpected is logged in one line and rendered as a 500 page.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from aiohttp import web

from tidemq.client.admin import Admin
from tidemq.console import html
from tidemq.console.auth import GATE, UNGATED_PATHS, Gate, gate
from tidemq.console.sampler import TpsSampler
from tidemq.console.settings import ConsoleSettings

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
SETTINGS = web.AppKey("settings", ConsoleSettings)
ADMIN = web.AppKey("admin", Admin)
SAMPLER = web.AppKey("sampler", TpsSampler)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class NotFound(Exception):
    """A topic, group or message named in the URL that the cluster does not know."""

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f"{kind} {name!r} not found")
        self.kind = kind
        self.name = name


def render(title: str, body: str, *, active: str = "", status: int = 200) -> web.Response:
    return web.Response(text=html.page(title, body, active=active), content_type="text/html", status=status)


@web.middleware
async def error_pages(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except NotFound as exc:
        return render(
            "Not found",
            f"<p id=not-found>The {html.e(exc.kind)} <code>{html.e(exc.name)}</code> does not exist.</p>",
            status=404,
        )
    except web.HTTPException as exc:
        if exc.status == 404:
            return render("Not found", f"<p id=not-found>No page at {html.e(request.path)}.</p>", status=404)
        raise
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.error("console: %s %s failed: %s: %s", request.method, request.path, type(exc).__name__, exc)
        return render(
            "Error", f"<p class=error id=server-error>The request failed: {html.e(exc)}</p>", status=500
        )


async def _lifetime(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    admin = Admin(settings.namesrv)
    app[GATE] = access = Gate(
        settings.namesrv, settings.acl, admin, open_paths=(*UNGATED_PATHS, *settings.open_paths)
    )
    sampler = TpsSampler(access.sampling_admin, settings.sample_seconds, settings.samples_kept)
    app[ADMIN] = admin
    app[SAMPLER] = sampler
    task = asyncio.create_task(sampler.run(), name="console-sampler")
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await access.close()
    await admin.close()


def create_console_app(settings: ConsoleSettings) -> web.Application:
    """The console as an aiohttp application, built from ``settings`` alone (no CLI): serve it on its own,
    or make it the root application of a port and add other routes (``/metrics``) before it starts;
    its login gate and CSRF check leave ``settings.open_paths`` alone."""
    from tidemq.console import (
        pages_groups,
        pages_login,
        pages_messages,
        pages_nsq,
        pages_overview,
        pages_topics,
    )

    # error_pages outside the gate: the gate sees a handler's NO_PERMISSION before it becomes a 500 page.
    app = web.Application(middlewares=[error_pages, gate])
    app[SETTINGS] = settings
    app.cleanup_ctx.append(_lifetime)
    for module in (pages_login, pages_overview, pages_topics, pages_groups, pages_messages, pages_nsq):
        module.add_routes(app)
    app.router.add_static("/static", STATIC)
    return app


def run_console(settings: ConsoleSettings, host: str, port: int) -> None:
    web.run_app(create_console_app(settings), host=host, port=port, print=None)
