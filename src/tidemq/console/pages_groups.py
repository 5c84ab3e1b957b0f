"""Consumer groups: the list, a group's members (client versions), per-queue lag, reset offset, delete."""

from __future__ import annotations

from aiohttp import web

from tidemq.client.admin import QueueProgress
from tidemq.client.instance import MQClientError
from tidemq.console import forms, html
from tidemq.console.app import NotFound, render
from tidemq.console.auth import admin_of
from tidemq.remoting.versions import version_name


def client_version(code: object) -> str:
    """A member's version as rocketmq-dashboard shows it (``V4_9_8``), the code itself when it is none."""
    if isinstance(code, int) and not isinstance(code, bool):
        return version_name(code)
    return str(code if code is not None else "")


async def groups(request: web.Request) -> web.Response:
    names = await admin_of(request).group_list()
    rows = [[f'<a href="/groups/{html.u(g)}">{html.e(g)}</a>'] for g in names]
    body = html.notice(request.query.get("done", "")) + html.table(["Group"], rows, id="group-list")
    return render("Consumer groups", body, active="/groups")


async def _progress(request: web.Request, group: str) -> dict[str, list[QueueProgress]]:
    try:
        return await admin_of(request).group_progress(group)
    except MQClientError:
        return {}


async def _known_group(request: web.Request) -> tuple[str, dict[str, list[QueueProgress]]]:
    group = request.match_info["group"]
    progress = await _progress(request, group)
    if not progress and group not in await admin_of(request).group_list():
        raise NotFound("consumer group", group)
    return group, progress


def _reset_form(group: str, topics: list[str], error: str = "", to: str = "earliest", at: str = "") -> str:
    options = "".join(f'<option value="{html.e(t)}">{html.e(t)}</option>' for t in topics)
    choices = "".join(
        f"<label><input type=radio name=to value={v}{' checked' if v == to else ''}> {label}</label> "
        for v, label in (("earliest", "earliest"), ("latest", "latest"), ("time", "at time"))
    )
    return (
        f"<h2>Reset offset</h2>{html.error_box(error)}"
        f'<form method=post action="/groups/{html.u(group)}/reset" id=reset-offset '
        f'data-confirm="Reset the offsets of {html.e(group)}? '
        'Its online consumers resume from the new offsets.">'
        f"<select name=topic id=reset-topic>{options}</select> {choices}"
        f'<input name=at id=reset-at placeholder="YYYY-MM-DDTHH:MM or epoch ms" value="{html.e(at)}"> '
        "<button type=submit id=reset-submit>Reset</button></form>"
    )


async def _group_page(request: web.Request, *, reset_form: str = "", status: int = 200) -> web.Response:
    group, progress = await _known_group(request)
    admin = admin_of(request)
    members = await admin.consumer_connections(group)
    member_rows = [
        [
            html.e(m.get("clientId", "")),
            html.e(m.get("clientAddr", "")),
            html.e(m.get("language", "")),
            html.e(client_version(m.get("version"))),
        ]
        for m in members
    ]
    lag_rows = [
        [
            html.e(topic),
            html.e(p.broker_name),
            html.e(p.queue_id),
            html.e(p.broker_offset),
            html.e(p.consumer_offset),
            html.e(p.lag),
        ]
        for topic, rows in sorted(progress.items())
        for p in rows
    ]
    total = sum(p.lag for rows in progress.values() for p in rows)
    # The group's own topics first: its %RETRY% topic is rarely the one to reset.
    topics = sorted(progress, key=lambda t: (t.startswith("%"), t)) or [
        t for t in await admin.topic_list() if not forms.is_system_topic(t)
    ]
    body = (
        html.notice(request.query.get("done", ""))
        + f"<h2>Members ({len(members)} online)</h2>"
        + html.table(["Client id", "Address", "Language", "Version"], member_rows, id="members")
        + f"<h2>Lag: <span id=total-lag>{total}</span></h2>"
        + html.table(
            ["Topic", "Broker", "Queue", "Broker offset", "Consumer offset", "Lag"], lag_rows, id="lag"
        )
        + (reset_form or _reset_form(group, topics))
        + f'<p><a href="/dlq?group={html.u(group)}">Dead letters of this group</a></p>'
        + html.action_form(f"/groups/{html.u(group)}/delete", "Delete group", f"Delete group {group}?")
    )
    return render(f"Consumer group {group}", body, active="/groups", status=status)


async def group_detail(request: web.Request) -> web.Response:
    return await _group_page(request)


async def reset(request: web.Request) -> web.Response:
    group, progress = await _known_group(request)
    data = await request.post()
    topic, to, at = str(data.get("topic", "")), str(data.get("to", "")), str(data.get("at", ""))
    # The group's own topics first: its %RETRY% topic is rarely the one to reset.
    topics = sorted(progress, key=lambda t: (t.startswith("%"), t)) or [topic]
    try:
        forms.name(topic, "topic")
        if to not in ("earliest", "latest", "time"):
            raise forms.FormError(f"reset to {to!r}: choose earliest, latest or a time")
        target: str | int = forms.timestamp_ms(at) if to == "time" else to
    except forms.FormError as exc:
        return await _group_page(request, reset_form=_reset_form(group, topics, str(exc), to, at), status=400)
    done = await admin_of(request).reset_offset(group, topic, target)
    note = f"Reset {group} on {topic} to {to}: {len(done)} queues"
    raise web.HTTPSeeOther(f"/groups/{html.u(group)}?done={html.u(note)}")


async def delete(request: web.Request) -> web.Response:
    group, _ = await _known_group(request)
    await admin_of(request).delete_group(group)
    raise web.HTTPSeeOther(f"/groups?done={html.u(f'Deleted group {group}')}")


def add_routes(app: web.Application) -> None:
    app.router.add_get("/groups", groups)
    app.router.add_get("/groups/{group}", group_detail)
    app.router.add_post("/groups/{group}/reset", reset)
    app.router.add_post("/groups/{group}/delete", delete)
