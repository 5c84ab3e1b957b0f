"""The one message type of the remoting protocol: a command (request or response)."""

from __future__ import annotations

from tidemq.remoting.codes import (
    CURRENT_VERSION,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    LanguageCode,
    ResponseCode,
    SerializeType,
)

Body = bytes | bytearray | memoryview


class RemotingCommand:
    """A request or response; ``ext_fields`` always hold strings, as every client expects."""

    __slots__ = (
        "body",
        "code",
        "ext_fields",
        "flag",
        "language",
        "opaque",
        "remark",
        "serialize_type",
        "version",
    )

    def __init__(
        self,
        code: int,
        *,
        opaque: int = 0,
        flag: int = 0,
        ext_fields: dict[str, str] | None = None,
        body: Body = b"",
        remark: str | None = None,
        language: int = LanguageCode.JAVA,
        version: int = CURRENT_VERSION,
        serialize_type: int = SerializeType.JSON,
    ) -> None:
        self.code = code
        self.opaque = opaque
        self.flag = flag
        self.ext_fields: dict[str, str] = ext_fields if ext_fields is not None else {}
        self.body = body
        self.remark = remark
        self.language = language
        self.version = version
        self.serialize_type = serialize_type

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def response(
        self,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: Body = b"",
    ) -> RemotingCommand:
        """Build the answer to this request: same opaque, response flag, the request's serialize type."""
        return RemotingCommand(
            code,
            opaque=self.opaque,
            flag=FLAG_RESPONSE,
            ext_fields=ext_fields,
            body=body,
            remark=remark,
            serialize_type=self.serialize_type,
        )

    def error(self, code: int, remark: str) -> RemotingCommand:
        return self.response(code, remark)

    def __repr__(self) -> str:
        kind = "response" if self.is_response else "request"
        return (
            f"RemotingCommand({kind} code={self.code} opaque={self.opaque} flag={self.flag} "
            f"ext={self.ext_fields!r} remark={self.remark!r} body={len(self.body)}B)"
        )
