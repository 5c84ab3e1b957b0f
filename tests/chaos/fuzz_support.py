"""Mutation and capture helpers for the network fuzzer (tests/chaos/test_fuzz_network.py).

Seeds are real traffic: what tidemq's own clients send, recorded by ``Recorder`` (a pass-through proxy),
or frames built with the protocol codecs. ``mutate`` breaks them the ways a bad peer or a bad network
would: bit flips, cuts, lying length fields, splices and plain noise.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
from collections.abc import Callable

_LIES = (0, 1, 3, 4, 0x7FFFFFFF, 0xFFFFFFFF, 0x80000000, 16 * 1024 * 1024 + 1, 5 * 1024 * 1024 + 1, 65536)


def _flip(rng: random.Random, data: bytearray, _seeds: list[bytes]) -> bytearray:
    for _ in range(rng.randint(1, 8)):
        if data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return data


def _cut(rng: random.Random, data: bytearray, _seeds: list[bytes]) -> bytearray:
    return data[: rng.randrange(len(data) + 1)]


def _length_lie(rng: random.Random, data: bytearray, _seeds: list[bytes]) -> bytearray:
    """A 32-bit field (a frame, header, body or message length, most likely at the front) that lies."""
    if len(data) < 4:
        return data
    at = rng.choice([0, 0, 4, rng.randrange(len(data) - 3)])
    value = rng.choice((*_LIES, len(data), len(data) + 1, max(len(data) - 5, 0), rng.getrandbits(32)))
    data[at : at + 4] = struct.pack(">I", value & 0xFFFFFFFF)
    return data


def _noise(rng: random.Random, _data: bytearray, _seeds: list[bytes]) -> bytearray:
    return bytearray(rng.randbytes(rng.randint(1, 2048)))


def _splice(rng: random.Random, data: bytearray, seeds: list[bytes]) -> bytearray:
    other = rng.choice(seeds)
    return data[: rng.randrange(len(data) + 1)] + other[rng.randrange(len(other) + 1) :]


def _insert(rng: random.Random, data: bytearray, _seeds: list[bytes]) -> bytearray:
    at = rng.randrange(len(data) + 1)
    filler = rng.choice([rng.randbytes(rng.randint(1, 64)), b"\x00" * rng.randint(1, 64), b"\xff" * 8, b"\n"])
    return data[:at] + filler + data[at:]


def _repeat(rng: random.Random, data: bytearray, _seeds: list[bytes]) -> bytearray:
    if not data:
        return data
    start = rng.randrange(len(data))
    piece = data[start : start + rng.randint(1, 256)]
    return data[:start] + piece * rng.randint(2, 20) + data[start:]


MUTATORS: list[Callable[[random.Random, bytearray, list[bytes]], bytearray]] = [
    _flip,
    _flip,
    _cut,
    _length_lie,
    _length_lie,
    _noise,
    _splice,
    _insert,
    _repeat,
]


def mutate(rng: random.Random, seeds: list[bytes], keep_prefix: bytes = b"") -> bytes:
    """One mutated seed; ``keep_prefix`` (a protocol magic) is kept intact nine times out of ten so the
    mutation reaches the parser behind it."""
    seed = rng.choice(seeds)
    prefix = keep_prefix if keep_prefix and seed.startswith(keep_prefix) and rng.random() < 0.9 else b""
    data = bytearray(seed[len(prefix) :])
    for _ in range(rng.randint(1, 3)):
        data = rng.choice(MUTATORS)(rng, data, seeds)
    return prefix + bytes(data)


def blast(port: int, payloads: list[bytes], rng: random.Random) -> None:
    """Send ``payloads`` on one connection, read whatever comes back, then close it: sometimes after a
    half-close (the peer sees EOF while it may still be answering), sometimes with a reset."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0) as s:
            for payload in payloads:
                s.sendall(payload)
            how = rng.random()
            if how < 0.3:
                s.shutdown(socket.SHUT_WR)
            s.settimeout(0.02)
            got = 0
            while got < 1 << 20:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += len(chunk)
            if how > 0.8:  # RST instead of FIN
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:  # refused, reset, timed out: all fine for the fuzzer, the checks come after
        pass


class Recorder:
    """A pass-through TCP proxy that keeps what each client connection sent: captured traffic."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.streams: list[bytearray] = []
        self._server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> Recorder:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sent = bytearray()
        self.streams.append(sent)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, keep: bytearray | None) -> None:
            try:
                while chunk := await src.read(65536):
                    if keep is not None:
                        keep += chunk
                    dst.write(chunk)
                    await dst.drain()
            except OSError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer, sent), pipe(up_reader, writer, None))
