"""The overview: brokers, topic and group counts, TPS in/out over the last minutes, commit-log size."""

from __future__ import annotations

from aiohttp import web

from tidemq.console import html
from tidemq.console.app import SAMPLER, render
from tidemq.console.auth import admin_of
from tidemq.console.forms import is_system_topic


async def overview(request: web.Request) -> web.Response:
    admin = admin_of(request)
    info = await admin.runtime_info()
    masters = await admin.cluster_masters()
    topics = [t for t in await admin.topic_list() if not is_system_topic(t)]
    groups = await admin.group_list()
    sampler = request.app[SAMPLER]
    disk = sum(
        int(t.get("commitLogMaxOffset") or 0) - int(t.get("commitLogMinOffset") or 0) for t in info.values()
    )
    cards = "".join(
        f'<div class=card id="count-{key}">{html.e(label)}<b>{value}</b></div>'
        for key, label, value in (
            ("brokers", "Brokers", len(masters)),
            ("topics", "Topics", len(topics)),
            ("groups", "Groups", len(groups)),
            ("disk", "Commit log", html.human_bytes(disk)),
        )
    )
    rows = [
        [
            html.e(name),
            html.e(masters.get(name, "")),
            html.e(t.get("brokerVersionDesc", "")),
            html.e(t.get("msgPutTotalTodayNow", "")),
            html.e(t.get("msgGetTotalTodayNow", "")),
            html.e(t.get("runtime", "")),
        ]
        for name, t in info.items()
    ]
    chart = html.svg_chart(sampler.rates(), id="tps-chart")
    body = (
        f"<div class=cards>{cards}</div><h2>Messages per second (sampled every "
        f"{sampler.every:g} s)</h2>{chart}<h2>Brokers</h2>"
        + html.table(["Broker", "Address", "Version", "Put today", "Got today", "Uptime"], rows, id="brokers")
    )
    return render("Overview", body, active="/")


def add_routes(app: web.Application) -> None:
    app.router.add_get("/", overview)
