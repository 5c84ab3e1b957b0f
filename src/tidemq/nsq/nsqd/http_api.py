"""nsqd's HTTP API (docs/protocols/nsq-http.md) on aiohttp: publishing, topic/channel administration, stats,
config.

Responses follow nsqd 1.x's "V1" conventions (``tidemq.nsq.http``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import orjson
from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from tidemq.address import is_host_port
from tidemq.nsq.http import ApiError, error_response, v1_json, v1_text
from tidemq.nsq.http_server import bad_requests
from tidemq.nsq.nsqd.config import LOG_LEVEL_NUMBERS
from tidemq.nsq.nsqd.stats import StatsQuery, nsqd_stats, render_text
from tidemq.nsq.protocol import MPUB_DECODE_STEP, NSQError, valid_name

if TYPE_CHECKING:
    from tidemq.nsq.nsqd.channel import Channel
    from tidemq.nsq.nsqd.server import Nsqd
    from tidemq.nsq.nsqd.topic import Topic

log = logging.getLogger(__name__)

NSQD_KEY: web.AppKey[Nsqd] = web.AppKey("nsqd")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def nsq_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """nsqd's error shapes for our own errors and aiohttp's routing ones (404, 405, 413)."""
    try:
        return await handler(request)
    except ApiError as exc:
        resp = error_response(exc.status, exc.message)
        if exc.status == 413:
            resp.force_close()  # the rest of the body is not read: this connection ends after the answer
        return resp
    except web.HTTPNotFound:
        return error_response(404, "NOT_FOUND")
    except web.HTTPMethodNotAllowed:
        return error_response(405, "METHOD_NOT_ALLOWED")
    except web.HTTPRequestEntityTooLarge:
        return error_response(413, "BODY_TOO_BIG")
    except web.HTTPException:
        raise
    except (RequestPayloadError, ConnectionError) as exc:
        # a body that cannot be read (bad chunking, the client gone mid-body) is the client's fault:
        # nsqd answers 500 INTERNAL_ERROR here, tidemq 400 and one rate-limited line, no traceback
        bad_requests.warning(
            "nsqd http: %s %s from %s: body unreadable: %s",
            request.method,
            request.path[:200],
            request.remote,
            exc,
        )
        return error_response(400, "INVALID_REQUEST")
    except Exception:
        log.exception("nsqd http: %s %s failed", request.method, request.path)
        return error_response(500, "INTERNAL_ERROR")


@web.middleware
async def acl_guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """With the ACL file on, the HTTP API (which has no AUTH) changes nothing for peers off the global
    white list: reads stay open, writes get 403 (docs/protocols/nsq-nsqd.md#auth-from-the-acl-file)."""
    if request.method not in ("GET", "HEAD") and not _nsqd(request).authenticator.http_allowed(
        request.remote or ""
    ):
        log.warning("nsqd http: refused %s %s from %s (acl)", request.method, request.path, request.remote)
        return error_response(403, "FORBIDDEN")
    return await handler(request)


def _nsqd(request: web.Request) -> Nsqd:
    return request.app[NSQD_KEY]


def _arg(request: web.Request, name: str) -> str:
    value = request.query.get(name)
    if value is None:
        raise ApiError(400, f"MISSING_ARG_{name.upper()}")
    return value


def _topic_name(request: web.Request, invalid: str = "INVALID_TOPIC") -> str:
    name = _arg(request, "topic")
    if not valid_name(name):
        raise ApiError(400, invalid)
    return name


def _channel_name(request: web.Request) -> str:
    name = _arg(request, "channel")
    if not valid_name(name):
        raise ApiError(400, "INVALID_ARG_CHANNEL")
    return name


def _find_topic(request: web.Request, name: str) -> Topic:
    topic = _nsqd(request).existing_topic(name)
    if topic is None:
        raise ApiError(404, "TOPIC_NOT_FOUND")
    return topic


def _channel_args(request: web.Request) -> tuple[Topic, str]:
    """The channel endpoints' ``topic`` (which must exist) and ``channel``, checked in nsqd's order."""
    topic_name = _topic_name(request, "INVALID_ARG_TOPIC")
    channel_name = _channel_name(request)
    return _find_topic(request, topic_name), channel_name


def _existing_channel(request: web.Request) -> tuple[Topic, Channel]:
    topic, channel_name = _channel_args(request)
    channel = topic.channels.get(channel_name)
    if channel is None:
        raise ApiError(404, "CHANNEL_NOT_FOUND")
    return topic, channel


def _flag(request: web.Request, name: str, default: bool) -> bool:
    """nsqd's boolean query params: true/1 and false/0; anything else counts as true."""
    value = request.query.get(name)
    if value is None:
        return default
    return value not in ("false", "0")


#: Bytes of a text ``/mpub`` split into messages between two yields to the event loop.
MPUB_SPLIT_STEP = 64 * 1024


async def _read_body(request: web.Request, limit: int, too_big: str) -> bytes:
    """At most ``limit`` bytes of the body, or 413 ``too_big`` as soon as the body is known to exceed it:
    from the declared length before reading anything, else on the first byte past the limit. The rest is
    never read (the connection closes after the answer)."""
    if request.content_length is not None and request.content_length > limit:
        raise ApiError(413, too_big)
    body = bytearray()
    while len(body) <= limit:
        chunk = await request.content.read(limit + 1 - len(body))
        if not chunk:
            return bytes(body)
        body += chunk
    raise ApiError(413, too_big)


async def _binary_mpub(body: bytes, max_msg_size: int, max_body_size: int) -> list[bytes]:
    """``/mpub?binary=true``, judged as nsqd reads it: element by element from the request body, yielding
    to the event loop every MPUB_DECODE_STEP elements (a 5 MB body holds a million).

    Unlike TCP MPUB (docs/protocols/nsq-tcp.md#mpub) the body has a definite end here, so nsqd's own rules
    apply: the count is bounded by the largest body that could hold it, an element cut short by the end of the
    body is BAD_MESSAGE, and bytes after the last counted element are ignored.
    """
    size = len(body)
    if size < 4:
        raise ApiError(413, "BAD_BODY")
    count = int.from_bytes(body[:4], "big", signed=True)
    if count <= 0 or count > (max_body_size - 4) // 5:
        raise ApiError(413, "BAD_BODY")
    bodies = []
    pos = 4
    for i in range(count):
        if i % MPUB_DECODE_STEP == MPUB_DECODE_STEP - 1:
            await asyncio.sleep(0)
        if pos + 4 > size:
            raise ApiError(413, "BAD_MESSAGE")
        length = int.from_bytes(body[pos : pos + 4], "big", signed=True)
        pos += 4
        if length <= 0 or length > max_msg_size or pos + length > size:
            raise ApiError(413, "BAD_MESSAGE")
        bodies.append(body[pos : pos + length])
        pos += length
    return bodies


async def _text_mpub(body: bytes, max_msg_size: int) -> list[bytes]:
    """``/mpub``'s newline-separated messages, split a slice at a time so that a body of millions of tiny
    messages does not hold the event loop (docs/nsq-server.md#http-requests-and-their-limits)."""
    bodies: list[bytes] = []
    start, size = 0, len(body)
    while start < size:
        end = body.find(b"\n", start + MPUB_SPLIT_STEP)
        if end < 0:
            end = size
        lines = [line for line in body[start:end].split(b"\n") if line]
        if any(len(line) > max_msg_size for line in lines):
            raise ApiError(413, "MSG_TOO_BIG")
        bodies += lines
        start = end + 1
        if start < size:
            await asyncio.sleep(0)
    return bodies


# --- handlers ---------------------------------------------------------------------------------------------


async def ping(request: web.Request) -> web.Response:
    error = _nsqd(request).health_problem
    if error:
        return web.Response(text=f"NOK - {error}", status=500)
    return web.Response(text="OK")


async def info(request: web.Request) -> web.Response:
    return v1_json(_nsqd(request).info())


async def stats(request: web.Request) -> web.Response:
    query = StatsQuery(
        topic=request.query.get("topic"),
        channel=request.query.get("channel"),
        include_clients=_flag(request, "include_clients", True),
        include_mem=_flag(request, "include_mem", True),
    )
    data = nsqd_stats(_nsqd(request), query)
    if request.query.get("format") == "json":
        return v1_json(data)
    return v1_text(render_text(data))


async def _publish(request: web.Request, topic: str, bodies: list[bytes], defer_ms: int = 0) -> web.Response:
    try:
        await _nsqd(request).publish(topic, bodies, defer_ms=defer_ms)
    except NSQError as exc:
        log.error("nsqd http: publish to %s failed: %s", topic, exc)
        raise ApiError(503, "EXITING") from None
    return v1_text("OK")


async def pub(request: web.Request) -> web.Response:
    cfg = _nsqd(request).config
    body = await _read_body(request, cfg.max_msg_size, "MSG_TOO_BIG")
    if not body:
        raise ApiError(400, "MSG_EMPTY")
    topic = _topic_name(request)
    defer_ms = 0
    if "defer" in request.query:
        try:
            defer_ms = int(request.query["defer"])
        except ValueError:
            raise ApiError(400, "INVALID_DEFER") from None
        if not 0 <= defer_ms <= cfg.max_req_timeout_ms:
            raise ApiError(400, "INVALID_DEFER")
    return await _publish(request, topic, [body], defer_ms)


async def mpub(request: web.Request) -> web.Response:
    cfg = _nsqd(request).config
    body = await _read_body(request, cfg.max_body_size, "BODY_TOO_BIG")
    topic = _topic_name(request)
    if _flag(request, "binary", False):
        bodies = await _binary_mpub(body, cfg.max_msg_size, cfg.max_body_size)
    else:
        bodies = await _text_mpub(body, cfg.max_msg_size)
    return await _publish(request, topic, bodies)


async def topic_create(request: web.Request) -> web.Response:
    _nsqd(request).topic(_topic_name(request))
    return v1_text()


async def topic_delete(request: web.Request) -> web.Response:
    if not _nsqd(request).delete_topic(_arg(request, "topic")):
        raise ApiError(404, "TOPIC_NOT_FOUND")
    return v1_text()


async def topic_empty(request: web.Request) -> web.Response:
    _find_topic(request, _topic_name(request)).empty()
    _nsqd(request).persist()  # what was emptied must not come back after a crash
    return v1_text()


def _topic_pause(paused: bool) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        topic = _find_topic(request, _arg(request, "topic"))
        _nsqd(request).set_paused(topic, None, paused)
        return v1_text()

    return handler


async def channel_create(request: web.Request) -> web.Response:
    topic, channel_name = _channel_args(request)
    topic.channel(channel_name)
    return v1_text()


async def channel_delete(request: web.Request) -> web.Response:
    topic, channel = _existing_channel(request)
    _nsqd(request).delete_channel(topic.name, channel.name)
    return v1_text()


async def channel_empty(request: web.Request) -> web.Response:
    _, channel = _existing_channel(request)
    channel.empty()
    _nsqd(request).persist()  # what was emptied must not come back after a crash
    return v1_text()


def _channel_pause(paused: bool) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        topic, channel = _existing_channel(request)
        _nsqd(request).set_paused(topic, channel, paused)
        return v1_text()

    return handler


async def config_get(request: web.Request) -> web.Response:
    values = _nsqd(request).option_values()
    opt = request.match_info["opt"]
    if opt not in values:
        raise ApiError(400, "INVALID_OPTION")
    return v1_json(values[opt])


async def config_put(request: web.Request) -> web.Response:
    nsqd = _nsqd(request)
    opt = request.match_info["opt"]
    body = await _read_body(request, nsqd.config.max_msg_size, "INVALID_VALUE")
    if not body:
        raise ApiError(413, "INVALID_VALUE")
    if opt == "nsqlookupd_tcp_addresses":
        try:
            addresses = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise ApiError(400, "INVALID_VALUE") from None
        if not isinstance(addresses, list) or not all(is_host_port(a) for a in addresses):
            raise ApiError(400, "INVALID_VALUE")
        await nsqd.set_lookupd_addresses(addresses)
    elif opt == "log_level":
        level = body.decode(errors="replace").lower()  # as nsqd parses it: no trimming
        if level not in LOG_LEVEL_NUMBERS:
            raise ApiError(400, "INVALID_VALUE")
        nsqd.log_level = level
    else:
        raise ApiError(400, "INVALID_OPTION")
    return v1_json(nsqd.option_values()[opt])


def make_app(nsqd: Nsqd) -> web.Application:
    cfg = nsqd.config
    app = web.Application(
        middlewares=[nsq_errors, acl_guard], client_max_size=max(cfg.max_body_size, cfg.max_msg_size) + 1
    )
    app[NSQD_KEY] = nsqd
    routes = [
        web.get("/ping", ping),
        web.get("/info", info),
        web.get("/stats", stats),
        web.post("/pub", pub),
        web.post("/mpub", mpub),
        web.post("/topic/create", topic_create),
        web.post("/topic/delete", topic_delete),
        web.post("/topic/empty", topic_empty),
        web.post("/topic/pause", _topic_pause(True)),
        web.post("/topic/unpause", _topic_pause(False)),
        web.post("/channel/create", channel_create),
        web.post("/channel/delete", channel_delete),
        web.post("/channel/empty", channel_empty),
        web.post("/channel/pause", _channel_pause(True)),
        web.post("/channel/unpause", _channel_pause(False)),
        web.get("/config/{opt}", config_get),
        web.put("/config/{opt}", config_put),
    ]
    app.add_routes(routes)
    return app
