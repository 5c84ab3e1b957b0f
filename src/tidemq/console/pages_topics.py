"""Topics: the list with search, create (with a queue count), delete, and a topic's queues and route."""

from __future__ import annotations

import time

from aiohttp import web

from tidemq.console import forms, html
from tidemq.console.app import NotFound, render
from tidemq.console.auth import admin_of


def _create_form(error: str = "", topic: str = "", queues: str = "8") -> str:
    return (
        f"<h2>Create a topic</h2>{html.error_box(error)}"
        '<form method=post action="/topics" id=create-topic data-confirm="Create this topic?">'
        f'<label>Name <input name=topic id=topic-name value="{html.e(topic)}"></label> '
        f'<label>Queues <input name=queues id=topic-queues value="{html.e(queues)}" size=4></label> '
        "<button type=submit id=create-topic-submit>Create</button></form>"
    )


async def _topics_page(request: web.Request, *, form: str = "", status: int = 200) -> web.Response:
    show_system = request.query.get("system") == "1"
    needle = request.query.get("q", "").strip().lower()
    topics = [
        t
        for t in await admin_of(request).topic_list()
        if (show_system or not forms.is_system_topic(t)) and needle in t.lower()
    ]
    rows = [[f'<a href="/topics/{html.u(t)}">{html.e(t)}</a>'] for t in topics]
    notice = html.notice(request.query.get("done", ""))
    search = (
        '<form method=get action="/topics"><input name=q id=topic-search data-filter=topic-list '
        f'placeholder="search topics" value="{html.e(needle)}"> <label><input type=checkbox name=system '
        f"value=1{' checked' if show_system else ''}> system topics</label> <button>Search</button></form>"
    )
    body = notice + search + html.table(["Topic"], rows, id="topic-list") + (form or _create_form())
    return render("Topics", body, active="/topics", status=status)


async def topics(request: web.Request) -> web.Response:
    return await _topics_page(request)


async def create_topic(request: web.Request) -> web.Response:
    data = await request.post()
    raw_topic, raw_queues = str(data.get("topic", "")), str(data.get("queues", ""))
    try:
        topic = forms.name(raw_topic, "topic")
        queues = forms.queue_count(raw_queues)
    except forms.FormError as exc:
        return await _topics_page(request, form=_create_form(str(exc), raw_topic, raw_queues), status=400)
    brokers = await admin_of(request).create_topic(topic, queues)
    done = f"Created topic {topic} with {queues} queues on {', '.join(brokers)}"
    raise web.HTTPSeeOther(f"/topics/{html.u(topic)}?done={html.u(done)}")


async def _known_topic(request: web.Request) -> str:
    topic = request.match_info["topic"]
    if topic not in await admin_of(request).topic_list():
        raise NotFound("topic", topic)
    return topic


async def topic_detail(request: web.Request) -> web.Response:
    topic = await _known_topic(request)
    admin = admin_of(request)
    stats = await admin.topic_stats(topic)
    now = time.time() * 1000
    rows = [
        [
            html.e(s["broker"]),
            html.e(s["queue"]),
            html.e(s.get("minOffset", 0)),
            html.e(s.get("maxOffset", 0)),
            html.e(int(s.get("maxOffset", 0)) - int(s.get("minOffset", 0))),
            html.e(_ago(now, int(s.get("lastUpdateTimestamp") or 0))),
        ]
        for s in stats
    ]
    route = await admin.route(topic)
    route_rows = [
        [html.e(name), html.e(", ".join(f"{k}: {v}" for k, v in sorted(b.addrs.items())))]
        for name, b in sorted(route.brokers.items())
    ]
    queue_rows = [
        [html.e(q.broker_name), html.e(q.read_queue_nums), html.e(q.write_queue_nums), html.e(q.perm)]
        for q in route.queue_datas
    ]
    body = (
        html.notice(request.query.get("done", ""))
        + f"<p>Messages stored: <b id=topic-total>{sum(int(r[4]) for r in rows)}</b></p>"
        + "<h2>Queues</h2>"
        + html.table(
            ["Broker", "Queue", "Min offset", "Max offset", "Messages", "Last stored"], rows, id="queues"
        )
        + "<h2>Route</h2>"
        + html.table(["Broker", "Addresses (id: address)"], route_rows, id="route-brokers")
        + html.table(["Broker", "Read queues", "Write queues", "Perm"], queue_rows, id="route-queues")
        + f'<p><a href="/messages?topic={html.u(topic)}">Messages of this topic</a></p>'
        + html.action_form(f"/topics/{html.u(topic)}/delete", "Delete topic", f"Delete topic {topic}?")
    )
    return render(f"Topic {topic}", body, active="/topics")


def _ago(now_ms: float, then_ms: int) -> str:
    return "never" if then_ms <= 0 else f"{max(0.0, (now_ms - then_ms) / 1000):.0f} s ago"


async def delete_topic(request: web.Request) -> web.Response:
    topic = await _known_topic(request)
    brokers = await admin_of(request).delete_topic(topic)
    done = f"Deleted topic {topic} from {', '.join(brokers)}"
    raise web.HTTPSeeOther(f"/topics?done={html.u(done)}")


def add_routes(app: web.Application) -> None:
    app.router.add_get("/topics", topics)
    app.router.add_post("/topics", create_topic)
    app.router.add_get("/topics/{topic}", topic_detail)
    app.router.add_post("/topics/{topic}/delete", delete_topic)
