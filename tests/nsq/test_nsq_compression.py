"""NSQ stream compression (spec 1.8): snappy framing and raw deflate, fed in arbitrary slices."""

from __future__ import annotations

import os
import struct
import zlib

import crc32c
import pytest
import snappy  # python-snappy: the implementation pynsq uses, as an independent reference
from cramjam import snappy as raw_snappy
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.nsq.compression import (
    STREAM_IDENTIFIER,
    CompressionError,
    Deflate,
    Snappy,
    StreamCompression,
)

WRITES = st.lists(
    st.binary(max_size=3000)
    | st.builds(lambda n, b: b * n, st.integers(1, 500), st.binary(min_size=1, max_size=8))
)


def feed_split(codec: StreamCompression, stream: bytes, cuts: list[int]) -> bytes:
    """Decode ``stream`` handed over in the pieces that the (sorted) cut points make."""
    points = sorted({c % (len(stream) + 1) for c in cuts})
    out = []
    previous = 0
    for point in [*points, len(stream)]:
        out.append(codec.decompress(stream[previous:point]))
        previous = point
    return b"".join(out)


def chunks(stream: bytes) -> list[tuple[int, bytes]]:
    """Split a framed snappy stream into (chunk type, chunk body) without decoding it."""
    result = []
    pos = 0
    while pos < len(stream):
        (word,) = struct.unpack_from("<I", stream, pos)
        length = word >> 8
        result.append((word & 0xFF, stream[pos + 4 : pos + 4 + length]))
        pos += 4 + length
    assert pos == len(stream)
    return result


def masked(data: bytes) -> int:
    c = crc32c.crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def chunk(kind: int, body: bytes) -> bytes:
    return struct.pack("<I", kind | len(body) << 8) + body


def data_chunk(data: bytes, crc: int | None = None) -> bytes:
    return chunk(0x01, struct.pack("<I", masked(data) if crc is None else crc) + data)


# --- snappy ----------------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(writes=WRITES, cuts=st.lists(st.integers(min_value=0), max_size=12))
def test_snappy_round_trip_any_split(writes: list[bytes], cuts: list[int]) -> None:
    writer = Snappy()
    stream = b"".join(writer.compress(w) for w in writes)
    assert feed_split(Snappy(), stream, cuts) == b"".join(writes)


@settings(max_examples=60, deadline=None)
@given(writes=WRITES)
def test_snappy_each_write_is_decodable_at_once(writes: list[bytes]) -> None:
    """What one ``compress`` returns decodes completely, without waiting for later writes."""
    writer, reader = Snappy(), Snappy()
    for w in writes:
        assert reader.decompress(writer.compress(w)) == w


def test_snappy_stream_starts_with_identifier_once() -> None:
    writer = Snappy()
    first = writer.compress(b"hello")
    second = writer.compress(b"world")
    assert first.startswith(STREAM_IDENTIFIER)
    assert STREAM_IDENTIFIER not in second
    assert writer.compress(b"") == b""


def test_snappy_large_write_is_split_into_64k_chunks() -> None:
    compressible = b"nsq message body " * 20000  # ~340 KB
    incompressible = os.urandom(150_000)
    stream = Snappy().compress(compressible + incompressible)
    parsed = chunks(stream)
    assert parsed[0] == (0xFF, b"sNaPpY")
    decoded = []
    kinds = set()
    for kind, body in parsed[1:]:
        kinds.add(kind)
        (crc,) = struct.unpack_from("<I", body)
        data = bytes(raw_snappy.decompress_raw(body[4:])) if kind == 0 else body[4:]
        assert len(data) <= 65536
        assert crc == masked(data)
        decoded.append(data)
    assert kinds == {0x00, 0x01}  # compressed where it helps, stored where it does not
    assert b"".join(decoded) == compressible + incompressible
    assert len(parsed) - 1 == -(-len(compressible + incompressible) // 65536)
    reader = Snappy()
    assert b"".join(reader.decompress(stream[i : i + 1000]) for i in range(0, len(stream), 1000)) == (
        compressible + incompressible
    )


@pytest.mark.parametrize("size", [1, 100, 65535, 65536, 65537, 300_000])
def test_snappy_against_python_snappy(size: int) -> None:
    data = (os.urandom(size // 2) + b"x" * (size - size // 2))[:size]
    ours = Snappy().compress(data)
    assert snappy.StreamDecompressor().decompress(ours) == data
    theirs = snappy.StreamCompressor().add_chunk(data)
    assert Snappy().decompress(theirs) == data


def test_snappy_reads_pynsq_style_stream_with_repeated_identifiers() -> None:
    """pynsq makes a new StreamCompressor for every write, so each write restarts the stream."""
    writes = [b"PUB t\n", struct.pack(">i", 5) + b"hello", b"NOP\n" * 50]
    stream = b"".join(snappy.StreamCompressor().add_chunk(w) for w in writes)
    assert stream.count(STREAM_IDENTIFIER) >= len(writes)
    assert feed_split(Snappy(), stream, [3, 11, 17, 40]) == b"".join(writes)


def test_snappy_ours_is_read_incrementally_by_python_snappy() -> None:
    writer = Snappy()
    reader = snappy.StreamDecompressor()
    for i in range(20):
        body = f"message {i} ".encode() * (i * 37 + 1)
        assert reader.decompress(writer.compress(body)) == body


def test_snappy_corrupt_crc_is_rejected() -> None:
    good = Snappy().compress(b"some payload " * 10)
    assert good[10] == 0x00  # compressed chunk right after the identifier
    bad = bytearray(good)
    bad[14] ^= 0x01  # first CRC byte
    with pytest.raises(CompressionError, match="checksum"):
        Snappy().decompress(bytes(bad))
    with pytest.raises(CompressionError, match="checksum"):
        Snappy().decompress(STREAM_IDENTIFIER + data_chunk(b"abc", crc=masked(b"abd")))


def test_snappy_corrupt_block_is_rejected() -> None:
    block = bytes(raw_snappy.compress_raw(b"abcabcabcabcabcabcabc" * 10))
    broken = block[:-3]
    with pytest.raises(CompressionError):
        Snappy().decompress(STREAM_IDENTIFIER + chunk(0x00, struct.pack("<I", 0) + broken))
    # a block announcing more than one chunk may hold is refused before it is decoded
    huge = bytes([0x80, 0x80, 0x80, 0x01]) + b"\x00"
    with pytest.raises(CompressionError, match="declares"):
        Snappy().decompress(STREAM_IDENTIFIER + chunk(0x00, struct.pack("<I", 0) + huge))


@pytest.mark.parametrize("kind", [0x02, 0x10, 0x7F])
def test_snappy_reserved_unskippable_chunk_is_rejected(kind: int) -> None:
    with pytest.raises(CompressionError, match="chunk type"):
        Snappy().decompress(STREAM_IDENTIFIER + chunk(kind, b"xyz"))


def test_snappy_padding_and_skippable_chunks_are_ignored() -> None:
    stream = (
        STREAM_IDENTIFIER
        + chunk(0xFE, b"\x00" * 10)
        + data_chunk(b"one")
        + chunk(0x80, b"ignored")
        + chunk(0xFD, b"z" * 200_000)  # skippable chunks may be longer than a data chunk
        + STREAM_IDENTIFIER
        + data_chunk(b"two")
        + chunk(0xFE, b"")
    )
    assert Snappy().decompress(stream) == b"onetwo"
    assert feed_split(Snappy(), stream, [5, 16, 30, 31, 100, 50_000, 200_020, 200_025]) == b"onetwo"
    one_byte_at_a_time = Snappy()
    assert b"".join(one_byte_at_a_time.decompress(stream[i : i + 1]) for i in range(2000)) == b"one"


def test_snappy_bad_lengths_are_rejected_before_buffering() -> None:
    reader = Snappy()
    assert reader.decompress(STREAM_IDENTIFIER) == b""
    with pytest.raises(CompressionError, match="length"):
        reader.decompress(struct.pack("<I", 0x00 | (200_000 << 8)))  # only the header has arrived
    with pytest.raises(CompressionError, match="length"):
        Snappy().decompress(STREAM_IDENTIFIER + struct.pack("<I", 0x01 | (65536 + 5) << 8))
    with pytest.raises(CompressionError, match="length"):
        Snappy().decompress(STREAM_IDENTIFIER + chunk(0x01, b"abc"))  # shorter than its CRC


def test_snappy_stream_identifier_is_checked() -> None:
    with pytest.raises(CompressionError, match="before the stream identifier"):
        Snappy().decompress(data_chunk(b"abc"))
    with pytest.raises(CompressionError, match="identifier"):
        Snappy().decompress(b"\xff\x06\x00\x00sNaPpZ")
    with pytest.raises(CompressionError, match="identifier"):
        Snappy().decompress(chunk(0xFF, b"sNaPpY!"))
    reader = Snappy()
    assert reader.decompress(STREAM_IDENTIFIER[:7]) == b""
    assert reader.decompress(STREAM_IDENTIFIER[7:] + data_chunk(b"ok")) == b"ok"


# --- deflate ---------------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    writes=WRITES,
    cuts=st.lists(st.integers(min_value=0), max_size=12),
    level=st.integers(min_value=1, max_value=9),
)
def test_deflate_round_trip_any_split(writes: list[bytes], cuts: list[int], level: int) -> None:
    writer = Deflate(level)
    stream = b"".join(writer.compress(w) for w in writes)
    assert feed_split(Deflate(), stream, cuts) == b"".join(writes)


def test_deflate_is_raw_and_sync_flushed() -> None:
    writer = Deflate()
    plain = zlib.decompressobj(-15)  # an independent raw-deflate reader, as go's flate is
    for i in range(10):
        body = f"frame {i} ".encode() * (i + 1) * 100
        out = writer.compress(body)
        assert out.endswith(b"\x00\x00\xff\xff")
        assert plain.decompress(out) == body
    peer = zlib.compressobj(6, zlib.DEFLATED, -15)
    reader = Deflate()
    big = os.urandom(70_000) + b"a" * 200_000
    assert reader.decompress(peer.compress(big) + peer.flush(zlib.Z_SYNC_FLUSH)) == big
    assert writer.compress(b"") == b""


def test_deflate_garbage_is_rejected() -> None:
    with pytest.raises(CompressionError):
        Deflate().decompress(b"\xff\xff\xff\xff garbage that is not deflate")
    with pytest.raises(CompressionError):
        Deflate().decompress(zlib.compress(b"zlib header is not raw deflate"))


def test_deflate_data_after_final_block_is_rejected() -> None:
    peer = zlib.compressobj(6, zlib.DEFLATED, -15)
    finished = peer.compress(b"last words") + peer.flush()
    reader = Deflate()
    with pytest.raises(CompressionError, match="after the end"):
        reader.decompress(finished + b"more")
    reader = Deflate()
    assert reader.decompress(finished) == b"last words"
    with pytest.raises(CompressionError, match="after the end"):
        reader.decompress(b"more")


def test_deflate_level_is_validated() -> None:
    with pytest.raises(ValueError):
        Deflate(10)
    assert Deflate(1).name == "deflate" and Snappy().name == "snappy"
