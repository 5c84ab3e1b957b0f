"""nsqlookupd's HTTP API (docs/protocols/nsq-lookupd.md#http-api), with nsqd's V1 response conventions.

Every answer but ``/ping`` carries ``X-NSQ-Content-Type: nsq; version=1.0`` and structured ones are
unwrapped JSON: go-nsq falls back to the pre-1.0 wrapper (and sees zero producers) without the header,
and pynsq reads ``producers`` at the top level. Routing is done here rather than by aiohttp's router so
that unknown paths and wrong methods get nsqd's JSON errors.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_plus

import orjson
from aiohttp import web

from tidemq.nsq.http import V1_HEADERS, ApiError
from tidemq.nsq.protocol import VERSION, valid_name

if TYPE_CHECKING:
    from tidemq.nsq.lookupd.registry import RegistrationDB

log = logging.getLogger(__name__)

_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")

Query = dict[str, list[str]]
Handler = Callable[["RegistrationDB", Query], Any]


def parse_query(raw: str) -> Query:
    """Go's url.ParseQuery: a bad %-escape or a ``;`` makes the whole query invalid."""
    out: Query = {}
    for part in raw.split("&"):
        if not part:
            continue
        if ";" in part or _BAD_ESCAPE.search(part):
            raise ApiError(400, "INVALID_REQUEST")
        key, _, value = part.partition("=")
        out.setdefault(unquote_plus(key, errors="replace"), []).append(unquote_plus(value, errors="replace"))
    return out


def _arg(query: Query, name: str) -> str:
    values = query.get(name)
    if not values:
        raise ApiError(400, f"MISSING_ARG_{name.upper()}")
    return values[0]


def _topic_channel(query: Query) -> tuple[str, str]:
    topic = _arg(query, "topic")
    if not valid_name(topic):
        raise ApiError(400, "INVALID_ARG_TOPIC")
    channel = _arg(query, "channel")
    if not valid_name(channel):
        raise ApiError(400, "INVALID_ARG_CHANNEL")
    return topic, channel


def _info(db: RegistrationDB, query: Query) -> Any:
    return {"version": VERSION}


def _debug(db: RegistrationDB, query: Query) -> Any:
    return db.debug()


def _lookup(db: RegistrationDB, query: Query) -> Any:
    found = db.lookup(_arg(query, "topic"))
    if found is None:
        raise ApiError(404, "TOPIC_NOT_FOUND")
    channels, producers = found
    return {"channels": channels, "producers": [p.to_json() for p in producers]}


def _topics(db: RegistrationDB, query: Query) -> Any:
    return {"topics": db.topics()}


def _channels(db: RegistrationDB, query: Query) -> Any:
    return {"channels": db.channels(_arg(query, "topic"))}


def _nodes(db: RegistrationDB, query: Query) -> Any:
    return {"producers": db.nodes()}


def _create_topic(db: RegistrationDB, query: Query) -> Any:
    topic = _arg(query, "topic")
    if not valid_name(topic):
        raise ApiError(400, "INVALID_ARG_TOPIC")
    log.info("lookupd: adding topic %s", topic)
    db.create_topic(topic)


def _delete_topic(db: RegistrationDB, query: Query) -> Any:
    topic = _arg(query, "topic")
    log.info("lookupd: removing topic %s and its channels", topic)
    db.delete_topic(topic)


def _create_channel(db: RegistrationDB, query: Query) -> Any:
    topic, channel = _topic_channel(query)
    log.info("lookupd: adding channel %s of topic %s", channel, topic)
    db.create_channel(topic, channel)


def _delete_channel(db: RegistrationDB, query: Query) -> Any:
    topic, channel = _topic_channel(query)
    if not db.delete_channel(topic, channel):
        raise ApiError(404, "CHANNEL_NOT_FOUND")
    log.info("lookupd: removed channel %s of topic %s", channel, topic)


def _tombstone(db: RegistrationDB, query: Query) -> Any:
    topic = _arg(query, "topic")
    node = _arg(query, "node")
    count = db.tombstone(topic, node)
    log.info("lookupd: tombstoned %d producer(s) %s of topic %s", count, node, topic)


ROUTES: dict[str, dict[str, Handler]] = {
    "/info": {"GET": _info},
    "/debug": {"GET": _debug},
    "/lookup": {"GET": _lookup},
    "/topics": {"GET": _topics},
    "/channels": {"GET": _channels},
    "/nodes": {"GET": _nodes},
    "/topic/create": {"POST": _create_topic},
    "/topic/delete": {"POST": _delete_topic},
    "/channel/create": {"POST": _create_channel},
    "/channel/delete": {"POST": _delete_channel},
    "/topic/tombstone": {"POST": _tombstone},
}


def _respond(status: int, data: Any, headers: dict[str, str] | None = None) -> web.Response:
    all_headers = {**V1_HEADERS, **(headers or {})}
    if status != 200:
        data = {"message": data}
    if data is None:
        return web.Response(status=status, body=b"", headers=all_headers)
    if isinstance(data, str):
        data = data.encode()
    if isinstance(data, bytes):
        return web.Response(status=status, body=data, headers=all_headers)
    return web.Response(
        status=status,
        body=orjson.dumps(data),
        headers={**all_headers, "Content-Type": "application/json; charset=utf-8"},
    )


def make_app(db: RegistrationDB) -> web.Application:
    async def dispatch(request: web.Request) -> web.StreamResponse:
        path = request.path
        if path == "/ping":
            if request.method != "GET":
                return _respond(405, "METHOD_NOT_ALLOWED", {"Allow": "GET"})
            return web.Response(text="OK")
        methods = ROUTES.get(path)
        if methods is None:
            return _respond(404, "NOT_FOUND")
        handler = methods.get(request.method)
        if handler is None:
            return _respond(405, "METHOD_NOT_ALLOWED", {"Allow": ", ".join(methods)})
        try:
            return _respond(200, handler(db, parse_query(request.rel_url.raw_query_string)))
        except ApiError as err:
            return _respond(err.status, err.message)
        except Exception:
            log.exception("lookupd: %s %s failed", request.method, request.path_qs)
            return _respond(500, "INTERNAL_ERROR")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", dispatch)
    return app
