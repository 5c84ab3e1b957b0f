"""The overview: brokers, topic and group counts, TPS in/out over the last minutes, commit-log size and
the disk use the brokers report (commitLogDiskRatio)."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from tidemq.console import html
from tidemq.console.app import SAMPLER, render
from tidemq.console.auth import admin_of
from tidemq.console.forms import is_system_topic
from tidemq.remoting.transport import RemotingError
from tidemq.remoting.versions import version_name

log = logging.getLogger(__name__)


async def overview(request: web.Request) -> web.Response:
    """A broker that does not answer (hung, overloaded) gets a row saying so; the others are shown. The
    overview is the page one opens when something is wrong, so one silent broker must not blank it."""
    admin = admin_of(request)
    masters = await admin.cluster_masters()
    answers = await asyncio.gather(
        *(admin.broker_runtime_info(addr) for addr in masters.values()), return_exceptions=True
    )
    info: dict[str, dict[str, str]] = {}
    silent: dict[str, str] = {}
    for name, answer in sorted(zip(masters, answers, strict=True), key=lambda pair: pair[0]):
        if isinstance(answer, RemotingError):  # not a refusal (NO_PERMISSION goes on to the login gate)
            log.warning("console: broker %s did not answer GET_BROKER_RUNTIME_INFO: %s", name, answer)
            silent[name] = str(answer) or type(answer).__name__
        elif isinstance(answer, BaseException):
            raise answer
        else:
            info[name] = answer
    topics = [t for t in await admin.topic_list() if not is_system_topic(t)]
    groups: list[str] | None = await admin.group_list() if not silent else None
    sampler = request.app[SAMPLER]
    log_bytes = sum(
        int(t.get("commitLogMaxOffset") or 0) - int(t.get("commitLogMinOffset") or 0) for t in info.values()
    )
    cards = "".join(
        f'<div class=card id="count-{key}">{html.e(label)}<b>{value}</b></div>'
        for key, label, value in (
            ("brokers", "Brokers", len(masters)),
            ("topics", "Topics", len(topics)),
            ("groups", "Groups", "?" if groups is None else len(groups)),
            ("commit-log", "Commit log", html.human_bytes(log_bytes)),
            ("disk", "Disk used", _worst_disk(info)),
        )
    )
    rows = [
        [
            html.e(name),
            html.e(masters.get(name, "")),
            html.e(_version(t)),
            html.e(t.get("msgPutTotalTodayNow", "")),
            html.e(t.get("msgGetTotalTodayNow", "")),
            html.e(_disk(t)),
            html.e(t.get("runtime", "")),
        ]
        for name, t in info.items()
    ]
    rows += [
        [html.e(name), html.e(masters[name]), f"<span class=error>no answer: {html.e(why)}</span>"] + [""] * 4
        for name, why in silent.items()
    ]
    chart = html.svg_chart(sampler.rates(), id="tps-chart")
    body = (
        f"<div class=cards>{cards}</div><h2>Messages per second (sampled every "
        f"{sampler.every:g} s)</h2>{chart}<h2>Brokers</h2>"
        + html.table(
            ["Broker", "Address", "Version", "Put today", "Got today", "Disk", "Uptime"], rows, id="brokers"
        )
    )
    return render("Overview", body, active="/")


def _version(table: dict[str, str]) -> str:
    """brokerVersionDesc when it is a name; else the name of the brokerVersion code."""
    desc = table.get("brokerVersionDesc", "")
    code = desc if desc.isdigit() else table.get("brokerVersion", "")
    return version_name(int(code)) if code.isdigit() else desc


def _ratio(table: dict[str, str]) -> float | None:
    """commitLogDiskRatio as Java's broker reports it (used share of the commit log's partition)."""
    try:
        ratio = float(table.get("commitLogDiskRatio", ""))
    except ValueError:
        return None
    return ratio if 0.0 <= ratio <= 1.0 else None


def _disk(table: dict[str, str]) -> str:
    ratio = _ratio(table)
    if ratio is None:
        return "unknown"
    capacity = table.get("commitLogDirCapacity", "")
    return f"{ratio:.1%}" + (f" ({capacity.rstrip('.')})" if capacity else "")


def _worst_disk(info: dict[str, dict[str, str]]) -> str:
    """The fullest broker's disk: the one that starts deleting or refusing writes first."""
    ratios = [r for r in (_ratio(t) for t in info.values()) if r is not None]
    return f"{max(ratios):.1%}" if ratios else "unknown"


def add_routes(app: web.Application) -> None:
    app.router.add_get("/", overview)
