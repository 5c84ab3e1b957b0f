"""The pages' HTML: one layout, tables, forms and the inline SVG chart, all escaped here so the handlers
only pass values."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from html import escape
from urllib.parse import quote

from tidemq.console.auth import CSRF_FIELD, current_csrf, current_user

NAV = (
    ("/", "Overview"),
    ("/topics", "Topics"),
    ("/groups", "Consumer groups"),
    ("/messages", "Messages"),
    ("/dlq", "Dead letters"),
    ("/nsq", "NSQ"),
)


def e(value: object) -> str:
    return escape(str(value), quote=True)


def u(value: str) -> str:
    """A path segment: topic and group names may hold % (the %RETRY%/%DLQ% topics)."""
    return quote(value, safe="")


_POST_FORM = re.compile(r"(<form\b[^>]*\bmethod=\"?post\"?[^>]*>)", re.IGNORECASE)


def with_csrf(body: str) -> str:
    """Every POST form gets the session's CSRF token, whoever wrote the form."""
    token = current_csrf.get()
    if not token:
        return body
    hidden = f'<input type=hidden name={CSRF_FIELD} value="{e(token)}">'
    return _POST_FORM.sub(lambda m: m.group(1) + hidden, body)


def page(title: str, body: str, *, active: str = "", status_note: str = "") -> str:
    nav = "".join(
        f'<a href="{href}"{" class=active" if href == active else ""}>{e(label)}</a>' for href, label in NAV
    )
    user = current_user.get()
    if user:
        nav += f' <span class=user id=user>{e(user)}</span> <a href="/logout" id=logout>Log out</a>'
    body = with_csrf(body)
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{e(title)} · tidemq console</title>"
        '<link rel=stylesheet href="/static/console.css"><script src="/static/console.js" defer></script>'
        f"</head><body><header><b>tidemq</b> console <nav>{nav}</nav></header><main><h1>{e(title)}</h1>"
        f"{status_note}{body}</main></body></html>"
    )


def error_box(message: str) -> str:
    return f"<p class=error role=alert id=form-error>{e(message)}</p>" if message else ""


def notice(message: str) -> str:
    return f"<p class=notice id=notice>{e(message)}</p>" if message else ""


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, id: str = "") -> str:
    """``rows`` hold HTML already (use :func:`e` for text cells)."""
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    ident = f" id={id}" if id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def action_form(action: str, label: str, confirm: str, fields: dict[str, str] | None = None) -> str:
    """A state-changing POST button; console.js asks ``confirm`` with the browser's confirm() first."""
    hidden = "".join(f'<input type=hidden name="{e(k)}" value="{e(v)}">' for k, v in (fields or {}).items())
    return (
        f'<form method=post action="{e(action)}" class=inline data-confirm="{e(confirm)}">'
        f"{hidden}<button type=submit>{e(label)}</button></form>"
    )


def svg_chart(series: dict[str, list[float]], *, width: int = 640, height: int = 180, id: str = "") -> str:
    """A line per series over the same sample points, scaled to the largest value; no script needed."""
    colours = ("#2b6cb0", "#c05621", "#2f855a", "#6b46c1")
    longest = max((len(v) for v in series.values()), default=0)
    top = max((max(v) for v in series.values() if v), default=0.0) or 1.0
    pad = 30
    lines = []
    legend = []
    for i, (name, values) in enumerate(series.items()):
        colour = colours[i % len(colours)]
        if len(values) > 1:
            step = (width - 2 * pad) / max(1, longest - 1)
            points = " ".join(
                f"{pad + j * step:.1f},{height - pad - v / top * (height - 2 * pad):.1f}"
                for j, v in enumerate(values)
            )
            lines.append(f'<polyline fill=none stroke="{colour}" stroke-width=2 points="{points}"/>')
        latest = values[-1] if values else 0.0
        peak = max(values, default=0.0)
        legend.append(
            f'<text x="{pad + i * 260}" y=16 fill="{colour}" class=legend data-peak="{peak:.1f}">'
            f"{e(name)}: {latest:.1f}/s (peak {peak:.1f}/s)</text>"
        )
    axis = (
        f'<line x1={pad} y1={height - pad} x2={width - pad} y2={height - pad} stroke="#999"/>'
        f"<text x=2 y={pad + 4} class=axis>{top:.0f}</text><text x=2 y={height - pad} class=axis>0</text>"
    )
    ident = f" id={id}" if id else ""
    return (
        f'<svg{ident} class=chart viewBox="0 0 {width} {height}" width={width} height={height} role=img>'
        f"{axis}{''.join(lines)}{''.join(legend)}</svg>"
    )


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
