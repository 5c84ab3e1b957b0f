"""Sans-IO stream compression for NSQ connections (docs/protocols/nsq-tcp.md#upgrades): raw deflate and snappy
framing.

After IDENTIFY negotiates compression, the whole byte stream of a connection (both directions) passes
through one of these objects. Frames may span chunks and chunks may hold several frames, so the
decoders accept arbitrary slices of the stream and keep what they cannot decode yet.
"""

from __future__ import annotations

import struct
import zlib
from typing import Protocol

import crc32c
from cramjam import DecompressionError
from cramjam import snappy as _snappy

__all__ = ["CompressionError", "Deflate", "Snappy", "StreamCompression"]


class CompressionError(Exception):
    """The peer sent a stream we cannot decode (bad checksum, unknown chunk, corrupt data)."""


class StreamCompression(Protocol):
    name: str

    def compress(self, data: bytes | bytearray | memoryview) -> bytes: ...

    def decompress(self, data: bytes | memoryview) -> bytes: ...


class Deflate:
    """Raw DEFLATE (no zlib header) both ways; every ``compress`` ends with a sync flush.

    The sync flush is what lets the peer decode a frame as soon as it arrives instead of waiting for
    the compressor's window to fill.
    """

    name = "deflate"

    def __init__(self, level: int = 6) -> None:
        if not -1 <= level <= 9:
            raise ValueError(f"deflate level must be in [-1, 9], got {level}")
        self.level = level
        self._compressor = zlib.compressobj(level, zlib.DEFLATED, -15)
        self._decompressor = zlib.decompressobj(-15)

    def compress(self, data: bytes | bytearray | memoryview) -> bytes:
        if not data:
            return b""
        return self._compressor.compress(data) + self._compressor.flush(zlib.Z_SYNC_FLUSH)

    def decompress(self, data: bytes | memoryview) -> bytes:
        decompressor = self._decompressor
        if decompressor.eof:
            if data:
                raise CompressionError("data after the end of the deflate stream")
            return b""
        try:
            out = decompressor.decompress(data)
        except zlib.error as exc:
            raise CompressionError(f"corrupt deflate stream: {exc}") from None
        if decompressor.unused_data:
            raise CompressionError("data after the end of the deflate stream")
        return out


STREAM_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"
MAX_BLOCK = 65536
# golang/snappy MaxEncodedLen(65536) + checksum: the largest compressed chunk a conforming writer emits.
MAX_COMPRESSED_CHUNK = 32 + MAX_BLOCK + MAX_BLOCK // 6 + 4
MAX_UNCOMPRESSED_CHUNK = MAX_BLOCK + 4

_CHUNK_COMPRESSED = 0x00
_CHUNK_UNCOMPRESSED = 0x01
_CHUNK_PADDING = 0xFE
_CHUNK_STREAM_ID = 0xFF
_HEADER = struct.Struct("<I")  # type | length << 8
_HEADER_CRC = struct.Struct("<II")  # header word, masked CRC-32C
_CRC = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF


def _masked_crc(data: bytes | memoryview) -> int:
    c = crc32c.crc32c(data)
    return ((((c >> 15) | (c << 17)) & _U32) + _MASK_DELTA) & _U32


def _declared_length(block: memoryview) -> int:
    """The uncompressed length a raw snappy block announces (its varint preamble), or -1 if malformed.

    Checked before decompressing so a hostile block cannot make us allocate more than one chunk's worth.
    """
    result = 0
    for shift, byte in zip(range(0, 35, 7), block[:5], strict=False):
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result
    return -1


class Snappy:
    """The snappy framing format as golang/snappy writes and reads it (what nsqd and pynsq speak)."""

    name = "snappy"

    def __init__(self) -> None:
        self._wrote_identifier = False
        self._seen_identifier = False
        self._buffer = bytearray()
        self._skip = 0

    # -- writing --------------------------------------------------------------------------------------

    def compress(self, data: bytes | bytearray | memoryview) -> bytes:
        if not data:
            return b""
        parts: list[bytes | memoryview] = []
        if not self._wrote_identifier:
            parts.append(STREAM_IDENTIFIER)
            self._wrote_identifier = True
        view = memoryview(data)
        for start in range(0, len(view), MAX_BLOCK):
            block = view[start : start + MAX_BLOCK]
            crc = _masked_crc(block)
            compressed = bytes(_snappy.compress_raw(block))
            size = len(block)
            # Same threshold as golang/snappy: a saving under 12.5% is not worth the peer's decode time.
            if len(compressed) >= size - size // 8:
                parts.append(_HEADER_CRC.pack(_CHUNK_UNCOMPRESSED | (size + 4) << 8, crc))
                parts.append(block)
            else:
                parts.append(_HEADER_CRC.pack(_CHUNK_COMPRESSED | (len(compressed) + 4) << 8, crc))
                parts.append(compressed)
        return b"".join(parts)

    # -- reading --------------------------------------------------------------------------------------

    def decompress(self, data: bytes | memoryview) -> bytes:
        if self._skip:
            skipped = min(self._skip, len(data))
            self._skip -= skipped
            data = data[skipped:]
        if not data:
            return b""
        buffer = self._buffer
        if not buffer:
            out, used = self._decode(data)
            if used < len(data):
                buffer += memoryview(data)[used:]
            return out
        buffer += data
        out, used = self._decode(buffer)
        del buffer[:used]
        return out

    def _decode(self, data: bytes | bytearray | memoryview) -> tuple[bytes, int]:
        """Decode every complete chunk in ``data``; return the output and how many bytes were used."""
        out: list[bytes] = []
        pos = 0
        end = len(data)
        with memoryview(data) as view:
            while end - pos >= 4:
                (word,) = _HEADER.unpack_from(view, pos)
                kind = word & 0xFF
                length = word >> 8
                if kind <= _CHUNK_UNCOMPRESSED:
                    if not self._seen_identifier:
                        raise CompressionError("snappy data chunk before the stream identifier")
                    limit = MAX_COMPRESSED_CHUNK if kind == _CHUNK_COMPRESSED else MAX_UNCOMPRESSED_CHUNK
                    if not 4 <= length <= limit:
                        raise CompressionError(f"snappy chunk of type {kind} has bad length {length}")
                    if end - pos - 4 < length:
                        break
                    start = pos + 4
                    pos = start + length
                    out.append(self._decode_data(kind, view[start:pos]))
                elif kind == _CHUNK_STREAM_ID:
                    if length != 6:
                        raise CompressionError(f"snappy stream identifier has bad length {length}")
                    if end - pos < 10:
                        break
                    if view[pos : pos + 10] != STREAM_IDENTIFIER:
                        raise CompressionError("bad snappy stream identifier")
                    self._seen_identifier = True
                    pos += 10
                elif kind >= 0x80:
                    if not self._seen_identifier:
                        raise CompressionError("snappy chunk before the stream identifier")
                    pos += 4
                    available = end - pos
                    if length > available:
                        self._skip = length - available
                        pos = end
                        break
                    pos += length
                else:
                    raise CompressionError(f"unsupported snappy chunk type 0x{kind:02x}")
        return b"".join(out), pos

    @staticmethod
    def _decode_data(kind: int, chunk: memoryview) -> bytes:
        (expected,) = _CRC.unpack_from(chunk)
        body = chunk[4:]
        if kind == _CHUNK_COMPRESSED:
            declared = _declared_length(body)
            if not 0 <= declared <= MAX_BLOCK:
                raise CompressionError(f"snappy block declares bad length {declared}")
            try:
                decoded = bytes(_snappy.decompress_raw(body))
            except DecompressionError as exc:
                raise CompressionError(f"corrupt snappy block: {exc}") from None
        else:
            if len(body) > MAX_BLOCK:
                raise CompressionError("snappy uncompressed chunk too long")
            decoded = bytes(body)
        if _masked_crc(decoded) != expected:
            raise CompressionError("snappy chunk checksum mismatch")
        return decoded
