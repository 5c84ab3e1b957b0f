"""nsqd 1.x's "V1" HTTP conventions, shared by nsqd's and nsqlookupd's APIs and the client's lookups.

Clients check them: the ``X-NSQ-Content-Type`` header on answers (go-nsq falls back to the pre-1.0
wrapper without it), raw text for string results, unwrapped JSON, and errors as ``{"message": "CODE"}``.
A client asks for them with ``Accept: application/vnd.nsq; version=1.0``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:  # imported where an answer is built: the client uses only the constants
    from aiohttp import web

#: What nsqd and nsqlookupd put on every V1 answer.
V1_HEADERS = {"X-NSQ-Content-Type": "nsq; version=1.0"}
#: What a client sends to be answered in the V1 form.
ACCEPT_V1 = "application/vnd.nsq; version=1.0"


class ApiError(Exception):
    """An HTTP error answer: its status and the ``message`` code."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def v1_json(data: Any, status: int = 200) -> web.Response:
    from aiohttp import web

    return web.Response(
        body=orjson.dumps(data),
        status=status,
        content_type="application/json",
        charset="utf-8",
        headers=V1_HEADERS,
    )


def v1_text(text: str = "") -> web.Response:
    from aiohttp import web

    return web.Response(text=text, headers=V1_HEADERS)


def error_response(status: int, message: str) -> web.Response:
    return v1_json({"message": message}, status)
