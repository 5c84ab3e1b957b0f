"""``apache.rocketmq.v2.Status`` answers and the error that carries one out of a request handler.

Every RPC answers gRPC OK with a status inside the response, as the proxy does: the SDKs read that status
(``Code``) and raise their own exceptions from it; a gRPC-level error would be retried as a network fault.
"""

from __future__ import annotations

from tidemq.grpc.proto import definition_pb2 as pb

Code = pb.Code


class GrpcStatusError(Exception):
    """A request refused with a ``Code`` and a message naming the problem."""

    def __init__(self, code: pb.Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def status(code: pb.Code, message: str | None = None) -> pb.Status:
    """A status whose message defaults to the code's name, as the proxy's ``buildStatus(code, name)``."""
    return pb.Status(code=code, message=pb.Code.Name(code) if message is None else message)


def ok() -> pb.Status:
    return status(Code.OK)


def error_status(exc: GrpcStatusError) -> pb.Status:
    return status(exc.code, exc.message)
