"""Re-wrapping a method handler around a per-request check, for the server interceptors.

grpc.aio interceptors can only act on a request by replacing the method's handler with one that runs the
check and then the original behaviour, once per handler kind. The ACL and the unparseable-request refusal
both need that, so it is written once here, with the interceptor around it.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
#: Runs before the behaviour sees a request (or stream message): None lets it pass, anything else is the
#: answer sent instead; raising (or aborting the context) ends the call.
Check = Callable[[Any, Context], Awaitable[Any]]


def checked_handler(
    handler: Handler,
    check: Check,
    request_deserializer: Callable[[bytes], Any] | None = None,
) -> Handler:
    """``handler`` with ``check`` run on every request, and ``request_deserializer`` in place of its own
    when given. A refused unary call answers the refusal; a refused server stream yields it alone; a
    refused message of a bidi stream ends the requests, and the refusal follows what the behaviour sends.
    Client-streaming handlers are returned unchanged (no MessagingService method is one)."""
    parse = request_deserializer or handler.request_deserializer
    if handler.unary_unary is not None:
        behavior: Any = handler.unary_unary  # a coroutine function on grpc.aio, typed as sync

        async def unary(request: Any, context: Context) -> Any:
            refused = await check(request, context)
            return refused if refused is not None else await behavior(request, context)

        return grpc.unary_unary_rpc_method_handler(unary, parse, handler.response_serializer)
    if handler.unary_stream is not None:
        stream_behavior: Any = handler.unary_stream

        async def unary_stream(request: Any, context: Context) -> AsyncIterator[Any]:
            refused = await check(request, context)
            if refused is not None:
                yield refused
                return
            async for item in stream_behavior(request, context):
                yield item

        return grpc.unary_stream_rpc_method_handler(unary_stream, parse, handler.response_serializer)
    if handler.stream_stream is not None:
        bidi_behavior: Any = handler.stream_stream

        async def stream_stream(requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
            refusals: list[Any] = []

            async def passed() -> AsyncIterator[Any]:
                async for request in requests:
                    refused = await check(request, context)
                    if refused is not None:
                        refusals.append(refused)
                        return
                    yield request

            async for item in bidi_behavior(passed(), context):
                yield item
            for item in refusals:
                yield item

        return grpc.stream_stream_rpc_method_handler(stream_stream, parse, handler.response_serializer)
    return handler


class CheckingInterceptor(grpc.aio.ServerInterceptor):
    """A server interceptor that re-wraps every method it finds (see ``checked_handler``)."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = str(handler_call_details.method).rsplit("/", 1)[-1]
        return self.wrap(handler, method, handler_call_details)

    @abstractmethod
    def wrap(self, handler: Handler, method: str, details: grpc.HandlerCallDetails) -> Handler:
        """``handler`` of ``method`` (its last path segment, as ``SendMessage``) with the check around it."""
