"""A connection pipelining many requests in one read is served REQUESTS_PER_PASS of them per loop pass, so
another connection's request is not queued behind all of them; every request is still answered, in
order, and the connection keeps being read."""

from __future__ import annotations

import asyncio

from tidemq.remoting.codes import ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.frame import FrameDecoder, encode
from tidemq.remoting.transport import (
    REQUESTS_PER_PASS,
    ProcessorResult,
    RemotingConnection,
    RemotingServer,
)

PIPELINED = 2 * REQUESTS_PER_PASS + 88


async def _answers(reader: asyncio.StreamReader, count: int) -> list[int]:
    """The opaques of the next ``count`` answers, in the order they arrive."""
    decoder, opaques = FrameDecoder(), []
    while len(opaques) < count:
        data = await asyncio.wait_for(reader.read(65536), 10)
        assert data, "closed before every answer came"
        for cmd in decoder.feed(memoryview(data)):
            assert isinstance(cmd, RemotingCommand) and cmd.code == ResponseCode.SUCCESS
            opaques.append(cmd.opaque)
    return opaques


async def test_a_pipelining_connection_does_not_hold_up_another() -> None:
    handled: list[tuple[str, int]] = []

    def handler(conn: RemotingConnection, req: RemotingCommand) -> ProcessorResult:
        handled.append((req.remark or "", req.opaque))
        return req.response(ResponseCode.SUCCESS)

    server = RemotingServer(handler, "127.0.0.1", 0)
    await server.start()
    try:
        flood_reader, flood = await asyncio.open_connection("127.0.0.1", server.port)
        other_reader, other = await asyncio.open_connection("127.0.0.1", server.port)
        await asyncio.sleep(0.1)  # both accepted
        # Both writes leave before the server's loop runs again: their reads come in the same pass.
        frames = [encode(RemotingCommand(300, opaque=i, remark="flood")) for i in range(PIPELINED)]
        flood.write(b"".join(frames))
        other.write(encode(RemotingCommand(300, opaque=7, remark="other")))
        assert await _answers(other_reader, 1) == [7]
        assert await _answers(flood_reader, PIPELINED) == list(range(PIPELINED))
        flooded_before = handled.index(("other", 7))
        assert flooded_before <= REQUESTS_PER_PASS, f"{flooded_before} flood requests were served first"
        flood.write(encode(RemotingCommand(300, opaque=PIPELINED, remark="flood")))  # still being read
        assert await _answers(flood_reader, 1) == [PIPELINED]
        flood.close()
        other.close()
    finally:
        await server.close()
