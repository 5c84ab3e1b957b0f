"""Sans-IO framing (docs/protocols/rocketmq-remoting.md): bytes in, commands out; commands in, bytes out.

Nothing here touches a socket, so the same code serves the asyncio transport, tests and fuzzers.
"""

from __future__ import annotations

import struct
from typing import Any

import orjson

from tidemq.remoting.codes import LanguageCode, SerializeType
from tidemq.remoting.command import Body, RemotingCommand

MAX_FRAME_LENGTH = 16 * 1024 * 1024

_INT = struct.Struct(">i")
_PREFIX = struct.Struct(">II")
_BINARY_FIXED = struct.Struct(">hbhii")
_LANG_BY_NAME = {lang.name: int(lang) for lang in LanguageCode}
_LANG_NAMES = {int(lang): lang.name for lang in LanguageCode}
_STR_ONLY = frozenset((str,))


class FrameError(ValueError):
    """The byte stream cannot be decoded; the connection that sent it has to be closed."""


class HeaderError(ValueError):
    """A frame arrived whole but its header is unusable (bad JSON, wrong types).

    ``opaque`` is set when the header got far enough to name its request, so the peer can be answered.
    """

    def __init__(self, reason: str, opaque: int | None = None, flag: int = 0) -> None:
        super().__init__(reason)
        self.opaque = opaque
        self.flag = flag


def normalize_ext_fields(raw: Any) -> dict[str, str]:
    """Turn a decoded extFields object into str -> str (docs/protocols/rocketmq-remoting.md#json-header:
    ali-ons sends numbers and booleans)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise HeaderError(f"extFields must be an object, got {type(raw).__name__}")
    if _STR_ONLY.issuperset(map(type, raw.values())):  # what Java and Go send: nothing to convert
        return raw
    out: dict[str, str] = {}
    for key, value in raw.items():
        if value is None:
            continue
        if isinstance(value, str):
            out[key] = value
        elif isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, int | float):
            out[key] = str(value)
        else:
            out[key] = orjson.dumps(value).decode()
    return out


def _int_field(header: dict[str, Any], name: str, default: int | None = None) -> int:
    value = header.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.lstrip("-").isdigit():
            try:
                return int(value)
            except ValueError:  # "--1", "²": isdigit() accepts what int() refuses
                pass
        raise HeaderError(f"header field {name!r} must be an integer, got {value!r}")
    return value


def _decode_json_header(data: bytes) -> RemotingCommand:
    try:
        header = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise HeaderError(f"header is not valid JSON: {exc}") from None
    if not isinstance(header, dict):
        raise HeaderError("header must be a JSON object")
    get = header.get
    language = get("language", "JAVA")
    if isinstance(language, str):
        lang = _LANG_BY_NAME.get(language, LanguageCode.OTHER)
    elif isinstance(language, int) and not isinstance(language, bool):
        lang = language
    else:
        lang = LanguageCode.OTHER
    remark = get("remark")
    code, opaque, flag, version = get("code"), get("opaque", 0), get("flag", 0), get("version", 0)
    if type(opaque) is not int or type(flag) is not int:  # the usual numbers pass without _int_field
        opaque, flag = _int_field(header, "opaque", 0), _int_field(header, "flag", 0)
    try:
        if type(code) is not int or type(version) is not int:
            code, version = _int_field(header, "code"), _int_field(header, "version", 0)
        return RemotingCommand(
            code,
            opaque=opaque,
            flag=flag,
            ext_fields=normalize_ext_fields(get("extFields")),
            remark=remark if isinstance(remark, str) else None,
            language=lang,
            version=version,
            serialize_type=SerializeType.JSON,
        )
    except HeaderError as exc:
        raise HeaderError(str(exc), opaque, flag) from None


def _decode_binary_header(data: bytes) -> RemotingCommand:
    view = memoryview(data)
    try:
        code, lang, version, opaque, flag = _BINARY_FIXED.unpack_from(view, 0)
        pos = _BINARY_FIXED.size
        (remark_len,) = _INT.unpack_from(view, pos)
        pos += 4
        if remark_len < 0 or pos + remark_len > len(view):
            raise HeaderError("binary header remark length out of range")
        remark = bytes(view[pos : pos + remark_len]).decode() if remark_len else None
        pos += remark_len
        (ext_len,) = _INT.unpack_from(view, pos)
        pos += 4
        end = pos + ext_len
        if ext_len < 0 or end > len(view):
            raise HeaderError("binary header extFields length out of range")
        fields: dict[str, str] = {}
        while pos < end:
            key_len = int.from_bytes(view[pos : pos + 2], "big")
            pos += 2
            key = bytes(view[pos : pos + key_len]).decode()
            pos += key_len
            (val_len,) = _INT.unpack_from(view, pos)
            pos += 4
            if val_len < 0 or pos + val_len > end:
                raise HeaderError("binary header extFields value length out of range")
            fields[key] = bytes(view[pos : pos + val_len]).decode()
            pos += val_len
        if pos != end:
            raise HeaderError("binary header extFields overrun")
    except (struct.error, UnicodeDecodeError) as exc:
        raise HeaderError(f"malformed binary header: {exc}") from None
    return RemotingCommand(
        code,
        opaque=opaque,
        flag=flag,
        ext_fields=fields,
        remark=remark,
        language=lang,
        version=version,
        serialize_type=SerializeType.ROCKETMQ,
    )


def decode_header(serialize_type: int, data: bytes) -> RemotingCommand:
    if serialize_type == SerializeType.JSON:
        return _decode_json_header(data)
    if serialize_type == SerializeType.ROCKETMQ:
        return _decode_binary_header(data)
    raise HeaderError(f"unknown serialize type {serialize_type}")


def encode_header(cmd: RemotingCommand) -> bytes:
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        remark = cmd.remark.encode() if cmd.remark else b""
        ext = bytearray()
        for key, value in cmd.ext_fields.items():
            k = key.encode()
            v = value.encode()
            ext += len(k).to_bytes(2, "big") + k + _INT.pack(len(v)) + v
        return b"".join(
            (
                _BINARY_FIXED.pack(cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag),
                _INT.pack(len(remark)),
                remark,
                _INT.pack(len(ext)),
                ext,
            )
        )
    header: dict[str, Any] = {
        "code": cmd.code,
        "language": _LANG_NAMES.get(cmd.language, "OTHER"),
        "version": cmd.version,
        "opaque": cmd.opaque,
        "flag": cmd.flag,
    }
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    if cmd.ext_fields:
        header["extFields"] = cmd.ext_fields
    return orjson.dumps(header)


def encode_parts(cmd: RemotingCommand) -> tuple[bytes, Body]:
    """Return (prefix + header, body) so a large body is written without being copied."""
    header = encode_header(cmd)
    length = 4 + len(header) + len(cmd.body)
    if length + 4 > MAX_FRAME_LENGTH:  # Java counts the length field itself against its limit
        raise FrameError(f"frame of {length} bytes exceeds the {MAX_FRAME_LENGTH} byte limit")
    return _PREFIX.pack(length, (cmd.serialize_type << 24) | len(header)) + header, cmd.body


def encode(cmd: RemotingCommand) -> bytes:
    head, body = encode_parts(cmd)
    return head + bytes(body) if body else head


class FrameDecoder:
    """Incremental decoder: ``feed`` bytes, get back the whole commands they complete.

    A frame whose header cannot be decoded yields a ``HeaderError`` *in place of* the command (the
    stream is still in sync, so the connection may answer and go on); a broken length prefix raises
    ``FrameError`` because nothing after it can be trusted.
    """

    __slots__ = ("_buf", "_pos", "max_frame")

    def __init__(self, max_frame: int = MAX_FRAME_LENGTH) -> None:
        self._buf = bytearray()
        self._pos = 0
        self.max_frame = max_frame

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand | HeaderError]:
        """The commands ``data`` completes. Frames that arrive whole are decoded straight from ``data``
        (a connection's receive buffer, reused by the next read), so only a frame cut by the end of a
        read is copied here to wait for its rest."""
        buf = self._buf
        if not buf:
            view = data if isinstance(data, memoryview) else memoryview(data)
            out, pos = self._frames(view, 0)
            if pos < len(view):
                buf += view[pos:]  # ``_pos`` is already 0 while the buffer is empty
            return out
        buf += data
        with memoryview(buf) as view:
            out, pos = self._frames(view, self._pos)
        if pos == len(buf):
            buf.clear()
            pos = 0
        elif pos > 65536:
            del buf[:pos]
            pos = 0
        self._pos = pos
        return out

    def _frames(self, view: memoryview, pos: int) -> tuple[list[RemotingCommand | HeaderError], int]:
        """The whole frames in ``view`` from ``pos``, and where the first incomplete one starts."""
        out: list[RemotingCommand | HeaderError] = []
        end = len(view)
        while end - pos >= 4:
            (length,) = _INT.unpack_from(view, pos)
            if length < 4 or length > self.max_frame:
                raise FrameError(f"frame length {length} outside 4..{self.max_frame}")
            if end - pos - 4 < length:
                break
            (word,) = _INT.unpack_from(view, pos + 4)
            stype = (word >> 24) & 0xFF
            hdr_len = word & 0xFFFFFF
            if hdr_len > length - 4:
                raise FrameError(f"header length {hdr_len} runs past the frame of {length} bytes")
            hdr_start = pos + 8
            body_start = hdr_start + hdr_len
            frame_end = pos + 4 + length
            try:
                cmd = decode_header(stype, bytes(view[hdr_start:body_start]))
            except HeaderError as exc:
                out.append(exc)
            else:
                if frame_end > body_start:
                    cmd.body = bytes(view[body_start:frame_end])
                out.append(cmd)
            pos = frame_end
        return out, pos
