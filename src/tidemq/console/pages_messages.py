"""Messages: search by topic and time range, by key, by id; one message's body (text, JSON, hex) and
properties; resend to a group. Dead letters: a group's %DLQ% topic, each message resendable."""

from __future__ import annotations

import time

import orjson
from aiohttp import web

from tidemq.client.instance import MQClientError
from tidemq.console import forms, html
from tidemq.console.app import NotFound, render
from tidemq.console.auth import admin_of
from tidemq.record import MessageExt
from tidemq.remoting.names import dlq_topic


def _fmt_time(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) if ms > 0 else ""


def _message_rows(found: list[MessageExt], resend_group: str = "", back: str = "") -> list[list[str]]:
    rows = []
    for m in found:
        link = f'<a href="/messages/view?id={html.u(m.offset_msg_id)}">{html.e(m.msg_id)}</a>'
        row = [
            link,
            html.e(m.topic),
            html.e(m.tags or ""),
            html.e(m.keys or ""),
            html.e(_fmt_time(m.store_timestamp)),
            html.e(m.body[:60].decode("utf-8", "replace")),
        ]
        if resend_group:
            row.append(
                html.action_form(
                    "/messages/resend",
                    "Resend",
                    f"Resend this message to {resend_group}?",
                    {"id": m.offset_msg_id, "group": resend_group, "back": back},
                )
            )
        rows.append(row)
    return rows


HEADERS = ["Message id", "Topic", "Tags", "Keys", "Stored", "Body"]


def _search_forms(q: dict[str, str]) -> str:
    def field(name: str, label: str, size: int = 20) -> str:
        value = html.e(q.get(name, ""))
        return f'<label>{label} <input name={name} id=q-{name} size={size} value="{value}"></label> '

    return (
        '<form method=get action="/messages" id=by-time><input type=hidden name=by value=time>'
        + field("topic", "Topic")
        + field("begin", "From", 16)
        + field("end", "To", 16)
        + "<button id=search-time>Search by time</button></form>"
        + '<form method=get action="/messages" id=by-key><input type=hidden name=by value=key>'
        + field("ktopic", "Topic")
        + field("key", "Key")
        + "<button id=search-key>Search by key</button></form>"
        + '<form method=get action="/messages" id=by-id><input type=hidden name=by value=id>'
        + field("itopic", "Topic (for a producer's msg id)")
        + field("id", "Message id", 34)
        + "<button id=search-id>Find by id</button></form>"
    )


async def messages(request: web.Request) -> web.Response:
    q = dict(request.query)
    admin = admin_of(request)
    by = q.get("by", "")
    error, found = "", None
    try:
        if by == "time":
            topic = forms.name(q.get("topic", ""), "topic")
            now = int(time.time() * 1000)
            begin = forms.timestamp_ms(q["begin"], "start") if q.get("begin") else now - 3_600_000
            end = forms.timestamp_ms(q["end"], "end") if q.get("end") else now
            if begin > end:
                raise forms.FormError("the start of the time range is after its end")
            found = await admin.messages_between(await _known_topic(request, topic), begin, end)
        elif by == "key":
            topic = forms.name(q.get("ktopic", ""), "topic")
            if not q.get("key", "").strip():
                raise forms.FormError("the key is blank")
            found = await admin.query(await _known_topic(request, topic), q["key"].strip())
        elif by == "id":
            itopic = q.get("itopic", "").strip()
            topic_of_key = await _known_topic(request, forms.name(itopic, "topic")) if itopic else None
            found = [await _message(request, q.get("id", ""), topic_of_key, from_form=True)]
    except forms.FormError as exc:
        error = str(exc)
    status = 400 if error else 200
    results = (
        ""
        if found is None
        else f"<h2>{len(found)} found</h2>" + html.table(HEADERS, _message_rows(found), id="results")
    )
    return render(
        "Messages", html.error_box(error) + _search_forms(q) + results, active="/messages", status=status
    )


async def _known_topic(request: web.Request, topic: str) -> str:
    if topic not in await admin_of(request).topic_list():
        raise NotFound("topic", topic)
    return topic


async def _message(
    request: web.Request, msg_id: str, topic: str | None = None, *, from_form: bool = False
) -> MessageExt:
    """By offset message id (what the broker answers a send with), or by the unique key a producer
    reports as msg_id, which is looked up in ``topic``'s index."""
    msg_id = msg_id.strip()
    if not msg_id:
        raise forms.FormError("the message id is blank")
    try:
        return await admin_of(request).message_by_id(msg_id, topic)
    except MQClientError as exc:
        if from_form and topic is None and "--topic" in str(exc):
            raise forms.FormError(
                f"{msg_id!r} is not the offset message id of a known broker; if it is the msg id a "
                "producer returned, give its topic too"
            ) from None
        raise NotFound("message", msg_id) from None


def _body_views(body: bytes) -> str:
    text = body.decode("utf-8", "replace")
    try:
        as_json = orjson.dumps(orjson.loads(body), option=orjson.OPT_INDENT_2).decode()
    except orjson.JSONDecodeError:
        as_json = "(not JSON)"
    hexdump = " ".join(f"{b:02x}" for b in body[:4096])
    return (
        f"<h3>Text</h3><pre id=body-text>{html.e(text)}</pre>"
        f"<h3>JSON</h3><pre id=body-json>{html.e(as_json)}</pre>"
        f"<h3>Hex</h3><pre id=body-hex>{html.e(hexdump)}</pre>"
    )


async def view(request: web.Request) -> web.Response:
    msg = await _message(request, request.query.get("id", ""))
    facts: list[tuple[str, object]] = [
        ("Topic", msg.topic),
        ("Message id (unique key)", msg.msg_id),
        ("Offset message id", msg.offset_msg_id),
        ("Broker", msg.broker_name),
        ("Queue", msg.queue_id),
        ("Queue offset", msg.queue_offset),
        ("Born", _fmt_time(msg.born_timestamp)),
        ("Stored", _fmt_time(msg.store_timestamp)),
        ("Reconsume times", msg.reconsume_times),
    ]
    props = [[html.e(k), html.e(v)] for k, v in sorted(msg.properties.items())]
    resend = (
        '<h2>Resend to a group</h2><form method=post action="/messages/resend" id=resend '
        'data-confirm="Resend this message to the group?">'
        f'<input type=hidden name=id value="{html.e(msg.offset_msg_id)}">'
        f'<input type=hidden name=back value="/messages/view?id={html.e(html.u(msg.offset_msg_id))}">'
        '<input name=group id=resend-group placeholder="consumer group"> '
        "<button id=resend-submit>Resend</button></form>"
    )
    body = (
        html.notice(request.query.get("done", ""))
        + html.table(["", ""], [[html.e(k), html.e(v)] for k, v in facts], id="facts")
        + "<h2>Properties</h2>"
        + html.table(["Key", "Value"], props, id="properties")
        + "<h2>Body</h2>"
        + _body_views(msg.body)
        + resend
    )
    return render(f"Message {msg.msg_id}", body, active="/messages")


async def resend(request: web.Request) -> web.Response:
    data = await request.post()
    back = str(data.get("back", "")) or "/messages"
    if not back.startswith("/"):
        back = "/messages"
    try:
        group = forms.name(str(data.get("group", "")), "group")
        msg = await _message(request, str(data.get("id", "")))
    except forms.FormError as exc:
        return render("Resend", html.error_box(str(exc)), active="/messages", status=400)
    new_id = await admin_of(request).resend(msg, group)
    sep = "&" if "?" in back else "?"
    raise web.HTTPSeeOther(f"{back}{sep}done={html.u(f'Resent {msg.msg_id} to {group} as {new_id}')}")


async def dead_letters(request: web.Request) -> web.Response:
    admin = admin_of(request)
    group = request.query.get("group", "").strip()
    groups = await admin.group_list()
    options = "".join(
        f'<option{" selected" if g == group else ""} value="{html.e(g)}">{html.e(g)}</option>' for g in groups
    )
    body = (
        html.notice(request.query.get("done", ""))
        + f'<form method=get action="/dlq"><select name=group id=dlq-group>{options}</select> '
        "<button id=dlq-show>Show dead letters</button></form>"
    )
    if group:
        if group not in groups:
            raise NotFound("consumer group", group)
        topic = dlq_topic(group)
        if topic in await admin.topic_list():
            found = await admin.messages_between(topic, 0, int(time.time() * 1000) + 60_000)
        else:
            found = []
        back = f"/dlq?group={html.u(group)}"
        body += f"<h2>{len(found)} dead letters of {html.e(group)}</h2>" + html.table(
            [*HEADERS, ""], _message_rows(found, group, back), id="dead-letters"
        )
    return render("Dead letters", body, active="/dlq")


def add_routes(app: web.Application) -> None:
    app.router.add_get("/messages", messages)
    app.router.add_get("/messages/view", view)
    app.router.add_post("/messages/resend", resend)
    app.router.add_get("/dlq", dead_letters)
