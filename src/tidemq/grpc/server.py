"""The gRPC listener: a grpc.aio server on the running event loop, beside the remoting and NSQ ones."""

from __future__ import annotations

import asyncio
import errno
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from tidemq.connection_gate import ConnectionLimits
from tidemq.grpc.auth import AclInterceptor
from tidemq.grpc.proto import service_pb2_grpc as spb_grpc
from tidemq.grpc.service import MessagingService
from tidemq.grpc.unparseable import UnparseableInterceptor

if TYPE_CHECKING:
    from tidemq.broker.broker import Broker

log = logging.getLogger(__name__)

#: The SDKs send up to max_body_size (4 MiB by default) plus headers: leave room above grpc's 4 MiB default.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


@dataclass(slots=True)
class GrpcConfig:
    """``tidemq server --grpc-port`` and its TLS files (plaintext HTTP/2 without them)."""

    host: str
    port: int = 8081
    tls_cert: Path | None = None
    tls_key: Path | None = None
    #: Open connections in total (0: no cap); grpc core refuses past it by closing the socket before
    #: the HTTP/2 handshake. It has no per-IP count (docs/rocketmq-broker.md#connection-limits).
    max_connections: int = ConnectionLimits().max_connections
    #: A connection with no call this long is sent GOAWAY and closed (the proxy's grpcClientIdleTimeMills).
    idle_timeout_s: float = 120.0


def _bind_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


class GrpcServer:
    """Serves ``apache.rocketmq.v2.MessagingService`` over one broker."""

    def __init__(self, config: GrpcConfig, broker: Broker) -> None:
        self.config = config
        self.service = MessagingService(broker, config.host)
        self.broker = broker
        self.port = config.port
        self._server: grpc.aio.Server | None = None
        self._watch: asyncio.Task[None] | None = None

    @property
    def tls(self) -> bool:
        return self.config.tls_cert is not None

    async def start(self) -> None:
        quiet_grpc_tracebacks()
        await self._listen(self.config.port)
        self._watch = asyncio.create_task(self._supervise(), name="grpc-supervisor")

    async def _supervise(self) -> None:
        """Listen again when grpcio's accept loop dies under us.

        grpcio (1.8x) decodes each call's method path as UTF-8 in its server loop; one HTTP/2 request
        whose ``:path`` is not UTF-8 ends that loop and with it the whole endpoint, while the process
        lives on. Calls in progress are lost either way; rebinding keeps the port serving.
        """
        while self._server is not None:
            server = self._server
            try:
                await server.wait_for_termination()
            except Exception as exc:
                reason = f"{type(exc).__name__}: {exc}"
            else:
                reason = "stopped"
            if self._server is not server:  # close() stopped it
                return
            log.warning("gRPC endpoint on port %d ended (%s); listening again", self.port, reason)
            for _ in range(50):
                try:
                    await self._listen(self.port)
                    break
                except OSError:
                    await asyncio.sleep(0.1)
            else:
                log.error("gRPC endpoint could not listen again on port %d", self.port)
                self._server = None

    async def _listen(self, port: int) -> None:
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),
        ]
        if self.config.max_connections:
            options.append(("grpc.max_allowed_incoming_connections", self.config.max_connections))
        if self.config.idle_timeout_s:
            options.append(("grpc.max_connection_idle_ms", int(self.config.idle_timeout_s * 1000)))
        acl = self.broker.acl
        # With --acl-file every call is checked against the rules in force (reloaded with the file).
        interceptors: list[grpc.aio.ServerInterceptor] = [UnparseableInterceptor()]  # first: before the ACL
        if acl is not None:
            interceptors.append(AclInterceptor(lambda: acl.rules))
        server = grpc.aio.server(options=options, interceptors=interceptors)
        # protoc emits the registration function without annotations.
        spb_grpc.add_MessagingServiceServicer_to_server(self.service, _GenericOnly(server))  # type: ignore[no-untyped-call]
        address = _bind_address(self.config.host, port)
        try:
            if self.config.tls_cert is not None and self.config.tls_key is not None:
                credentials = grpc.ssl_server_credentials(
                    [(self.config.tls_key.read_bytes(), self.config.tls_cert.read_bytes())]
                )
                port = server.add_secure_port(address, credentials)
            else:
                port = server.add_insecure_port(address)
        except RuntimeError as exc:  # grpc's "Failed to bind to address"
            raise OSError(errno.EADDRINUSE, f"cannot listen for gRPC on {address}: {exc}") from None
        self.port = self.service.port = port
        await server.start()
        self._server = server
        log.info(
            "gRPC listening on %s (%s)",
            _bind_address(self.config.host, port),
            "TLS" if self.tls else "plaintext",
        )

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace=1.0)
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        await self.service.consumer.close()


class _GenericOnly:
    """Registers the service's methods as a generic handler only, never as grpcio "registered methods".

    grpcio (1.6x-1.85) keeps one pending request-call per registered method in its server loop. When
    that loop dies (a call whose ``:path`` is not UTF-8, see ``_supervise``) it cancels those pending
    requests while the C core still holds pointers into their Python call state, and the core writes
    into the freed memory on shutdown: the fuzzer's SIGSEGV of issue 23 (docs/reliability.md). With the
    generic handler alone nothing is pending when the loop dies, and a call finds its method by one dict
    lookup in Python either way.
    """

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server = server

    def add_generic_rpc_handlers(self, handlers: tuple[grpc.GenericRpcHandler, ...]) -> None:
        self._server.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler[Any, Any]]
    ) -> None:
        """Ignored on purpose (see the class)."""


class _OneLine(logging.Filter):
    """Turns a traceback raised inside grpcio's Cython core into one line naming the exception.

    grpcio logs a full traceback for every malformed call it refuses (metadata that is not UTF-8, a
    request that does not parse as its protobuf), so a bad client could fill the log; the line with
    the exception's text is all an operator can act on.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and _from_grpc_core(exc):
            record.msg = f"{record.getMessage()}: {type(exc).__name__}: {exc}"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        elif record.name == "grpc._cython.cygrpc":
            record.exc_info = None
            record.exc_text = None
            record.stack_info = None
        return True


def _from_grpc_core(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if "grpc/_cython" in tb.tb_frame.f_code.co_filename or "grpcio" in tb.tb_frame.f_code.co_filename:
            return True
        tb = tb.tb_next
    return False


_ONE_LINE = _OneLine()


def quiet_grpc_tracebacks() -> None:
    """Install the one-line filter on grpcio's logger and asyncio's (which reports grpcio's dead loop)."""
    for name in ("grpc._cython.cygrpc", "asyncio"):
        logger = logging.getLogger(name)
        if _ONE_LINE not in logger.filters:
            logger.addFilter(_ONE_LINE)
