"""Requests whose protobuf body does not parse: answered INVALID_ARGUMENT, logged as one rate-limited line.

grpcio's aio server turns a deserializer that raises into UNKNOWN with the exception text and logs a full
traceback per call, so a client sending garbage could fill the log. Java's proxy does not do better:
grpc-java's ProtoLiteUtils marshaller raises INTERNAL "Invalid protobuf byte sequence" and its ServerImpl
closes such a call UNKNOWN "Application error processing RPC" (the proxy's GlobalExceptionInterceptor only
sees errors after parsing). A body that is not the method's message is the caller's fault, which gRPC's
status codes name INVALID_ARGUMENT; no SDK retries it, as it should not.

The deserializer hands a marker instead of raising, and the behaviour aborts the call on that marker
before any handler (or the ACL check) sees it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from tidemq.connection_gate import RateLimitedLog
from tidemq.grpc.handlers import CheckingInterceptor, Context, Handler, checked_handler

log = logging.getLogger(__name__)


class Unparseable:
    """What the deserializer returns for bytes that are not the method's message."""

    __slots__ = ("problem",)

    def __init__(self, problem: str) -> None:
        self.problem = problem


#: A client sending garbage costs a line a second at most; the rest are counted in the next line.
_refusals = RateLimitedLog(log, 1)


def _lenient(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def parse(data: bytes) -> Any:
        try:
            return deserializer(data)
        except DecodeError as exc:
            return Unparseable(str(exc))

    return parse


async def _refuse(method: str, request: Unparseable, context: Context) -> None:
    _refusals.warning(
        "gRPC %s from %s: request does not parse (%s)", method, context.peer() or "?", request.problem
    )
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"request does not parse: {request.problem}")


class UnparseableInterceptor(CheckingInterceptor):
    """Wraps every method so an unparseable request (or stream message) ends the call INVALID_ARGUMENT."""

    def wrap(self, handler: Handler, method: str, details: grpc.HandlerCallDetails) -> Handler:
        async def check(request: Any, context: Context) -> None:
            if isinstance(request, Unparseable):
                await _refuse(method, request, context)

        return checked_handler(handler, check, _lenient(handler.request_deserializer))
