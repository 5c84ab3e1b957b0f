"""Connection bootstrap edge cases that a well-behaved nsqd never shows on demand.

The peers here are small stand-in servers written in the test (not tidemq components): they send exact
byte sequences, such as a compressed ``OK`` in the same write as the plaintext IDENTIFY reply.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import pytest

from tidemq.nsq.client import NotConnectedError, NSQClientError, Producer, ProtocolError
from tidemq.nsq.compression import Deflate
from tidemq.nsq.protocol import MAGIC_V2, encode_frame

GO_NSQ_IDENTIFY_KEYS = {
    "client_id",
    "hostname",
    "user_agent",
    "short_id",
    "long_id",
    "tls_v1",
    "deflate",
    "deflate_level",
    "snappy",
    "feature_negotiation",
    "heartbeat_interval",
    "sample_rate",
    "output_buffer_size",
    "output_buffer_timeout",
    "msg_timeout",
    "topology_region",
    "topology_zone",
}

Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter, dict[str, Any]], Awaitable[None]]


async def read_identify(reader: asyncio.StreamReader) -> dict[str, Any]:
    assert await reader.readexactly(4) == MAGIC_V2
    assert await reader.readline() == b"IDENTIFY\n"
    size = int.from_bytes(await reader.readexactly(4), "big")
    body: dict[str, Any] = orjson.loads(await reader.readexactly(size))
    return body


@contextlib.asynccontextmanager
async def stand_in(serve: Serve) -> AsyncIterator[str]:
    """A stand-in nsqd on a free port that answers each connection with ``serve``; yields its address."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await serve(reader, writer, await read_identify(reader))
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.close()
        await server.wait_closed()


async def test_compressed_bytes_right_behind_the_identify_reply_are_decoded() -> None:
    seen: dict[str, Any] = {}

    async def serve(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, identify: dict[str, Any]
    ) -> None:
        seen["identify"] = identify
        deflate = Deflate(identify["deflate_level"])
        answer = {"max_rdy_count": 100, "version": "1.3.0", "deflate": True, "deflate_level": 6}
        compressed = deflate.compress(encode_frame(0, b"OK") + encode_frame(0, b"_heartbeat_"))
        writer.write(encode_frame(0, orjson.dumps(answer)) + compressed)  # one write: the pitfall of spec 1.8
        received = b""
        while received.count(b"NOP\n") < 2:
            chunk = await asyncio.wait_for(reader.read(1024), 5)
            assert chunk, "client closed"
            received += deflate.decompress(chunk)
        seen["received"] = received

    async with stand_in(serve) as addr:
        producer = Producer(addr, deflate=True, deflate_level=4, heartbeat_interval=5.0, msg_timeout=2.5)
        await producer.ping()  # one NOP; the other answers the heartbeat that followed the OK
        assert producer._conn is not None and producer._conn.max_rdy_count == 100
        for _ in range(100):
            if "received" in seen:
                break
            await asyncio.sleep(0.05)
        await producer.stop()
    assert seen["received"] == b"NOP\nNOP\n"
    identify = seen["identify"]
    assert set(identify) == GO_NSQ_IDENTIFY_KEYS
    assert identify["feature_negotiation"] is True and identify["deflate"] is True
    assert (identify["deflate_level"], identify["heartbeat_interval"], identify["msg_timeout"]) == (
        4,
        5000,
        2500,
    )
    assert (identify["output_buffer_size"], identify["output_buffer_timeout"]) == (16384, 250)


async def test_bare_ok_identify_reply_and_error_replies() -> None:
    async def bare(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, identify: dict[str, Any]
    ) -> None:
        writer.write(encode_frame(0, b"OK"))
        assert await reader.readline() == b"NOP\n"

    async with stand_in(bare) as addr:
        producer = Producer(addr)
        await producer.ping()
        assert producer._conn is not None and producer._conn.identify is None
        assert producer._conn.max_rdy_count == 2500, "assumed when nsqd does not negotiate"
        await producer.stop()

    async def refuse(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, identify: dict[str, Any]
    ) -> None:
        writer.write(encode_frame(1, b"E_BAD_BODY IDENTIFY heartbeat interval (5) is invalid"))

    async with stand_in(refuse) as addr:
        with pytest.raises(ProtocolError) as info:
            await Producer(addr).ping()
        assert info.value.code == "E_BAD_BODY"

    async def http(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, identify: dict[str, Any]
    ) -> None:
        writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    async with stand_in(http) as addr:
        with pytest.raises(NSQClientError, match="HTTP port"):
            await Producer(addr).ping()


async def test_a_silent_nsqd_is_dropped_after_read_timeout() -> None:
    async def silent(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, identify: dict[str, Any]
    ) -> None:
        writer.write(encode_frame(0, b'{"max_rdy_count": 2500}'))
        await reader.read()  # never a heartbeat; wait for the client to give up

    async with stand_in(silent) as addr:
        producer = Producer(addr, heartbeat_interval=0.1, read_timeout=0.4)
        await producer.ping()
        assert producer.is_connected
        future = producer.publish_async("t", b"never answered")
        with pytest.raises(NotConnectedError):
            await asyncio.wait_for(future, 5)
        assert not producer.is_connected
