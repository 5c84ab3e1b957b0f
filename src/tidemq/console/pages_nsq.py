"""NSQ: nsqd's topics and channels (depth, in-flight, deferred, message rates) with pause/unpause, empty and
delete, and nsqlookupd's nodes, through their HTTP APIs as nsqadmin does."""

from __future__ import annotations

import time
from typing import Any

import aiohttp
from aiohttp import web

from tidemq.console import html
from tidemq.console.app import SETTINGS, render

#: The message counts seen at the previous look, for rates: (monotonic time, {(topic, channel): count}).
LAST_COUNTS = web.AppKey("nsq_last_counts", dict)
TIMEOUT = aiohttp.ClientTimeout(total=5)
ACTIONS = {
    "pause": "Pause",
    "unpause": "Unpause",
    "empty": "Empty",
    "delete": "Delete",
}

DONE = {"pause": "Paused", "unpause": "Unpaused", "empty": "Emptied", "delete": "Deleted"}


async def _get(address: str, path: str) -> Any:
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as session,
        session.get(f"http://{address}{path}") as resp,
    ):
        resp.raise_for_status()
        return await resp.json(content_type=None)


def _rate(request: web.Request, key: tuple[str, str], count: int, now: float) -> str:
    last = request.app[LAST_COUNTS]
    previous = last.get(key)
    last[key] = (now, count)
    if previous is None or now - previous[0] < 0.05:
        return "-"
    return f"{max(0, count - previous[1]) / (now - previous[0]):.1f}/s"


def _buttons(kind: str, topic: str, channel: str, paused: bool) -> str:
    fields = {"kind": kind, "topic": topic, **({"channel": channel} if channel else {})}
    what = f"{kind} {topic}" + (f"/{channel}" if channel else "")
    return "".join(
        html.action_form(f"/nsq/{action}", label, f"{label} {what}?", fields)
        for action, label in ACTIONS.items()
        if not (action == "pause" and paused) and not (action == "unpause" and not paused)
    )


async def nsq(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS]
    body = html.notice(request.query.get("done", ""))
    now = time.monotonic()
    if settings.nsqd_http:
        stats = await _get(settings.nsqd_http, "/stats?format=json")
        topic_rows, channel_rows = [], []
        for t in stats.get("topics") or []:
            name = str(t["topic_name"])
            paused = bool(t.get("paused"))
            topic_rows.append(
                [
                    html.e(name),
                    html.e(t.get("depth", 0)),
                    html.e(t.get("message_count", 0)),
                    html.e(_rate(request, (name, ""), int(t.get("message_count", 0)), now)),
                    "paused" if paused else "",
                    _buttons("topic", name, "", paused),
                ]
            )
            for c in t.get("channels") or []:
                channel = str(c["channel_name"])
                paused = bool(c.get("paused"))
                channel_rows.append(
                    [
                        html.e(name),
                        html.e(channel),
                        html.e(c.get("depth", 0)),
                        html.e(c.get("in_flight_count", 0)),
                        html.e(c.get("deferred_count", 0)),
                        html.e(c.get("requeue_count", 0)),
                        html.e(c.get("timeout_count", 0)),
                        html.e(c.get("client_count", 0)),
                        html.e(_rate(request, (name, channel), int(c.get("message_count", 0)), now)),
                        "<span class=paused>paused</span>" if paused else "",
                        _buttons("channel", name, channel, paused),
                    ]
                )
        body += (
            f"<h2>nsqd {html.e(settings.nsqd_http)}</h2><h3>Topics</h3>"
            + html.table(["Topic", "Depth", "Messages", "Rate", "", ""], topic_rows, id="nsq-topics")
            + "<h3>Channels</h3>"
            + html.table(
                [
                    "Topic",
                    "Channel",
                    "Depth",
                    "In flight",
                    "Deferred",
                    "Requeued",
                    "Timed out",
                    "Clients",
                    "Rate",
                    "",
                    "",
                ],
                channel_rows,
                id="nsq-channels",
            )
        )
    if settings.lookupd_http:
        nodes = await _get(settings.lookupd_http, "/nodes")
        rows = [
            [
                html.e(n.get("broadcast_address", "")),
                html.e(n.get("tcp_port", "")),
                html.e(n.get("http_port", "")),
                html.e(n.get("version", "")),
                html.e(", ".join(n.get("topics") or [])),
            ]
            for n in (nodes or {}).get("producers") or []
        ]
        body += f"<h2>nsqlookupd {html.e(settings.lookupd_http)} nodes</h2>" + html.table(
            ["Address", "TCP port", "HTTP port", "Version", "Topics"], rows, id="lookupd-nodes"
        )
    if not (settings.nsqd_http or settings.lookupd_http):
        body += "<p>No nsqd or nsqlookupd configured (--nsqd-http, --lookupd-http).</p>"
    return render("NSQ", body, active="/nsq")


async def action(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS]
    verb = request.match_info["action"]
    data = await request.post()
    kind, topic, channel = str(data.get("kind", "")), str(data.get("topic", "")), str(data.get("channel", ""))
    if (
        verb not in ACTIONS
        or kind not in ("topic", "channel")
        or not topic
        or (kind == "channel" and not channel)
    ):
        return render(
            "NSQ", html.error_box(f"unknown NSQ action {verb} on {kind}"), active="/nsq", status=400
        )
    if not settings.nsqd_http:
        return render("NSQ", html.error_box("no nsqd configured"), active="/nsq", status=400)
    params = {"topic": topic, **({"channel": channel} if kind == "channel" else {})}
    url = f"http://{settings.nsqd_http}/{kind}/{verb}"
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session, session.post(url, params=params) as resp:
        if resp.status != 200:
            text = await resp.text()
            return render(
                "NSQ", html.error_box(f"nsqd refused {kind} {verb}: {text}"), active="/nsq", status=400
            )
    what = topic + (f"/{channel}" if kind == "channel" else "")
    raise web.HTTPSeeOther(f"/nsq?done={html.u(f'{DONE[verb]} {kind} {what}')}")


def add_routes(app: web.Application) -> None:
    app[LAST_COUNTS] = {}
    app.router.add_get("/nsq", nsq)
    app.router.add_post("/nsq/{action}", action)
