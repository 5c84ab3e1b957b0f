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
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc
from google.protobuf.message import DecodeError

from tidemq.connection_gate import RateLimitedLog

log = logging.getLogger(__name__)

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


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


async def _refuse(method: str, request: Unparseable, context: grpc.aio.ServicerContext[Any, Any]) -> None:
    _refusals.warning(
        "gRPC %s from %s: request does not parse (%s)", method, context.peer() or "?", request.problem
    )
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"request does not parse: {request.problem}")


class UnparseableInterceptor(grpc.aio.ServerInterceptor):
    """Wraps every method so an unparseable request (or stream message) ends the call INVALID_ARGUMENT."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = str(handler_call_details.method).rsplit("/", 1)[-1]
        parse = _lenient(handler.request_deserializer)
        if handler.unary_unary is not None:
            behavior: Any = handler.unary_unary  # a coroutine function on grpc.aio, typed as sync

            async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                if isinstance(request, Unparseable):
                    await _refuse(method, request, context)
                return await behavior(request, context)

            return grpc.unary_unary_rpc_method_handler(unary, parse, handler.response_serializer)
        if handler.unary_stream is not None:
            stream_behavior: Any = handler.unary_stream

            async def unary_stream(
                request: Any, context: grpc.aio.ServicerContext[Any, Any]
            ) -> AsyncIterator[Any]:
                if isinstance(request, Unparseable):
                    await _refuse(method, request, context)
                async for item in stream_behavior(request, context):
                    yield item

            return grpc.unary_stream_rpc_method_handler(unary_stream, parse, handler.response_serializer)
        if handler.stream_stream is not None:
            bidi_behavior: Any = handler.stream_stream

            async def stream_stream(
                requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]
            ) -> AsyncIterator[Any]:
                async def parsed() -> AsyncIterator[Any]:
                    async for request in requests:
                        if isinstance(request, Unparseable):
                            await _refuse(method, request, context)
                        yield request

                async for item in bidi_behavior(parsed(), context):
                    yield item

            return grpc.stream_stream_rpc_method_handler(stream_stream, parse, handler.response_serializer)
        return handler
