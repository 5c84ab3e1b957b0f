"""A raw NSQ TCP client for tests: speaks the V2 protocol command by command."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import struct
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import trustme

from tests.support import ServerProcess, free_port
from tidemq.nsq.client import Producer
from tidemq.nsq.compression import Deflate, Snappy, StreamCompression
from tidemq.nsq.nsqd.config import NsqdConfig
from tidemq.nsq.nsqd.server import Nsqd
from tidemq.nsq.protocol import (
    MAGIC_V2,
    FrameParser,
    FrameType,
    Message,
    decode_message,
    encode_command,
    encode_mpub,
)
from tidemq.store import FlushMode, MessageStore, StoreConfig


class RawNsq:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.parser = FrameParser()
        self.frames: list[tuple[int, bytes]] = []
        self.heartbeats = 0
        self.compression: StreamCompression | None = None

    @classmethod
    async def open(cls, addr: str, *, magic: bool = True) -> RawNsq:
        host, port = addr.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        client = cls(reader, writer)
        if magic:
            writer.write(MAGIC_V2)
        return client

    def send(self, name: str, *params: str | bytes, body: bytes | None = None) -> None:
        self.send_raw(encode_command(name, *params, body=body))

    def send_raw(self, data: bytes) -> None:
        self.writer.write(self.compression.compress(data) if self.compression else data)

    async def frame(self, timeout: float = 5.0, skip_heartbeats: bool = True) -> tuple[int, bytes]:
        deadline = time.monotonic() + timeout
        while True:
            while self.frames:
                ftype, data = self.frames.pop(0)
                if skip_heartbeats and ftype == FrameType.RESPONSE and data == b"_heartbeat_":
                    self.heartbeats += 1
                    continue
                return ftype, data
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no frame")
            chunk = await asyncio.wait_for(self.reader.read(65536), remaining)
            if not chunk:
                raise ConnectionError("connection closed")
            if self.compression is not None:
                chunk = self.compression.decompress(chunk)
            self.frames += self.parser.feed(chunk)

    async def response(self, timeout: float = 5.0) -> bytes:
        ftype, data = await self.frame(timeout)
        assert ftype == FrameType.RESPONSE, (ftype, data)
        return data

    async def error(self, timeout: float = 5.0) -> bytes:
        ftype, data = await self.frame(timeout)
        assert ftype == FrameType.ERROR, (ftype, data)
        return data

    async def message(self, timeout: float = 5.0) -> Message:
        ftype, data = await self.frame(timeout)
        assert ftype == FrameType.MESSAGE, (ftype, data)
        return decode_message(data)

    async def identify(self, **fields: object) -> dict[str, object]:
        self.send("IDENTIFY", body=orjson.dumps({"feature_negotiation": True, **fields}))
        answer = await self.response()
        return orjson.loads(answer)  # type: ignore[no-any-return]

    async def identify_upgrade(
        self, tls: ssl.SSLContext | None = None, **fields: object
    ) -> dict[str, object]:
        """IDENTIFY, then follow the upgrades the server grants (TLS, then snappy or deflate).

        The JSON reply is read byte-exactly so that whatever follows it (the first compressed bytes)
        stays in the reader for the new decompressor, as spec 1.8 warns.
        """
        self.send(
            "IDENTIFY", body=orjson.dumps({"feature_negotiation": True, "tls_v1": tls is not None, **fields})
        )
        answer: dict[str, object] = orjson.loads(await self._exact_response())
        if answer["tls_v1"]:
            assert tls is not None
            await self.writer.start_tls(tls, server_hostname="127.0.0.1")
            assert await self._exact_response() == b"OK"
        if answer["snappy"] or answer["deflate"]:
            level = answer["deflate_level"]
            assert isinstance(level, int)
            self.compression = Snappy() if answer["snappy"] else Deflate(level)
            assert await self.response() == b"OK"
        return answer

    async def _exact_response(self) -> bytes:
        size, ftype = struct.unpack(">ii", await self.reader.readexactly(8))
        data = await self.reader.readexactly(size - 4)
        assert ftype == FrameType.RESPONSE, data
        return data

    async def pub(self, topic: str, body: bytes) -> bytes:
        self.send("PUB", topic, body=body)
        return await self.response()

    async def mpub(self, topic: str, bodies: list[bytes]) -> bytes:
        self.send_raw(encode_mpub(topic, bodies))
        return await self.response()

    async def sub(self, topic: str, channel: str, rdy: int = 0) -> None:
        self.send("SUB", topic, channel)
        assert await self.response() == b"OK"
        if rdy:
            self.send("RDY", str(rdy))

    async def drain(self, quiet: float, limit: int = 10_000) -> list[bytes]:
        """FIN and collect message bodies until nothing arrives for ``quiet`` seconds."""
        bodies: list[bytes] = []
        while len(bodies) < limit:
            try:
                msg = await self.message(quiet)
            except TimeoutError:
                break
            self.send("FIN", msg.id)
            bodies.append(msg.body)
        return bodies

    async def closed(self, timeout: float = 5.0) -> bool:
        """True once the server has closed the connection (after any frames it sent)."""
        try:
            while True:
                await self.frame(timeout)
        except ConnectionError:
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.writer.close()


class LookupdProcess(ServerProcess):
    """``tidemq nsqlookupd`` on two free loopback ports, broadcasting 127.0.0.1."""

    def __init__(self, data_dir: Path, *extra: str) -> None:
        self.tcp_port = free_port()
        self.http_port = free_port()
        super().__init__(
            data_dir,
            "--tcp-address",
            f"127.0.0.1:{self.tcp_port}",
            "--http-address",
            f"127.0.0.1:{self.http_port}",
            "--broadcast-address",
            "127.0.0.1",
            *extra,
            command="nsqlookupd",
        )

    @property
    def tcp(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"


class AuthServer:
    """A stand-in for an external auth service (not a tidemq component): secret -> fixed JSON answer.

    Unknown secrets get HTTP 403. Every query's parameters are kept in ``queries``.
    """

    def __init__(self, secrets: dict[str, Any]) -> None:
        self.queries: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
                outer.queries.append(query)
                answer = secrets.get(query.get("secret", ""))
                body = orjson.dumps(answer) if answer is not None else b"forbidden"
                self.send_response(200 if answer is not None else 403)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def tls_files(ca: trustme.CA, folder: Path) -> tuple[str, str]:
    """A certificate for 127.0.0.1 signed by the test CA, written as (cert file, key file)."""
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert.cert_chain_pems[0].write_to_path(str(cert_path))
    cert.private_key_pem.write_to_path(str(key_path))
    return str(cert_path), str(key_path)


def trusting(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


async def publish(addr: str, topic: str, bodies: list[bytes]) -> None:
    async with Producer(addr) as producer:
        for start in range(0, len(bodies), 100):
            await producer.multi_publish(topic, bodies[start : start + 100])


@contextlib.asynccontextmanager
async def nsqd_in_process(data_dir: Path, flush_mode: FlushMode = FlushMode.ASYNC) -> AsyncIterator[Nsqd]:
    """nsqd and its store in this process (on a free port), for tests that reach into its state."""
    store = MessageStore(StoreConfig(data_dir, flush_mode=flush_mode))
    await store.start()
    nsqd = Nsqd(NsqdConfig(tcp_port=0, http_port=None), store)
    await nsqd.start()
    try:
        yield nsqd
    finally:
        await nsqd.close()
        await store.close()
