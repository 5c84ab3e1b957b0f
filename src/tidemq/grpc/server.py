"""The gRPC listener: a grpc.aio server on the running event loop, beside the remoting and NSQ ones."""

from __future__ import annotations

import errno
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from tidemq.grpc.auth import AclInterceptor
from tidemq.grpc.proto import service_pb2_grpc as spb_grpc
from tidemq.grpc.service import MessagingService

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

    @property
    def tls(self) -> bool:
        return self.config.tls_cert is not None

    async def start(self) -> None:
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),
        ]
        acl = self.broker.acl
        # With --acl-file every call is checked against the rules in force (reloaded with the file).
        interceptors = [AclInterceptor(lambda: acl.rules)] if acl is not None else []
        server = grpc.aio.server(options=options, interceptors=interceptors)
        # protoc emits the registration function without annotations.
        spb_grpc.add_MessagingServiceServicer_to_server(self.service, server)  # type: ignore[no-untyped-call]
        address = _bind_address(self.config.host, self.config.port)
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
        if self._server is not None:
            await self._server.stop(grace=1.0)
            self._server = None
        await self.service.consumer.close()
