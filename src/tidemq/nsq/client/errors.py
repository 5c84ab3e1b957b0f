"""Errors of the NSQ client: what went wrong, in terms a caller can act on."""

from __future__ import annotations


class NSQClientError(Exception):
    """Base of every error raised by :mod:`tidemq.nsq.client`."""


class ConfigError(NSQClientError, ValueError):
    """An option name or value that go-nsq would refuse too."""


#: The only error frames after which nsqd keeps the connection open (docs/protocols/nsq-tcp.md#errors).
NON_FATAL_CODES = frozenset({"E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED"})


class ProtocolError(NSQClientError):
    """nsqd answered with an error frame; ``code`` is its ``E_*`` code (go-nsq's ``ErrProtocol``)."""

    def __init__(self, code: str, description: str = "") -> None:
        super().__init__(f"{code} {description}".rstrip())
        self.code = code
        self.description = description

    @property
    def fatal(self) -> bool:
        """nsqd closes the connection after a fatal error."""
        return self.code not in NON_FATAL_CODES

    @classmethod
    def from_frame(cls, data: bytes) -> ProtocolError:
        code, _, description = data.decode(errors="replace").partition(" ")
        return cls(code, description)


class NotConnectedError(NSQClientError):
    """The connection is gone (or never came up); the command was not answered."""


class AlreadyConnectedError(NSQClientError):
    """``connect_to_nsqd`` for an address that is already connected or connecting."""


class StoppedError(NSQClientError):
    """The producer or consumer has been stopped."""


class AuthError(NSQClientError):
    """nsqd requires AUTH and no secret is configured, or it refused the secret."""
