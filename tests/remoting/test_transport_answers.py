"""Answers that come later: a processor may return a future (a send under sync flush, resolved by the
store's flusher) or any other awaitable; either is answered when it resolves, a failure as the protocol's
error, and a cancelled future not at all, the connection going on being served."""

from __future__ import annotations

import asyncio

from tidemq.remoting.codes import ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.frame import FrameDecoder, encode
from tidemq.remoting.transport import ProcessorResult, RemotingConnection, RemotingServer

LATER, FAILS, CANCELLED, COROUTINE = 901, 902, 903, 904


async def _answer(reader: asyncio.StreamReader, decoder: FrameDecoder) -> RemotingCommand:
    while True:
        data = await asyncio.wait_for(reader.read(65536), 10)
        assert data, "closed before the answer came"
        answers = decoder.feed(memoryview(data))
        if answers:
            assert len(answers) == 1
            answer = answers[0]
            assert isinstance(answer, RemotingCommand)
            return answer


async def test_future_and_coroutine_answers_are_sent_when_they_resolve() -> None:
    loop = asyncio.get_running_loop()

    async def later(req: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(0.01)
        return req.response(ResponseCode.SUCCESS, remark="from a coroutine")

    def handler(conn: RemotingConnection, req: RemotingCommand) -> ProcessorResult:
        if req.code == COROUTINE:
            return later(req)
        answer: asyncio.Future[RemotingCommand | None] = loop.create_future()
        if req.code == LATER:
            loop.call_later(0.01, answer.set_result, req.response(ResponseCode.SUCCESS, remark="later"))
        elif req.code == FAILS:
            loop.call_later(0.01, answer.set_exception, ValueError("the disk said no"))
        else:
            loop.call_later(0.01, answer.cancel)
        return answer

    server = RemotingServer(handler, "127.0.0.1", 0)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        decoder = FrameDecoder()

        writer.write(encode(RemotingCommand(LATER, opaque=1)))
        answer = await _answer(reader, decoder)
        assert (answer.opaque, answer.code, answer.remark) == (1, ResponseCode.SUCCESS, "later")

        writer.write(encode(RemotingCommand(FAILS, opaque=2)))
        answer = await _answer(reader, decoder)
        assert (answer.opaque, answer.code) == (2, ResponseCode.SYSTEM_ERROR)
        assert answer.remark == f"bad request {FAILS}: the disk said no"

        # A cancelled answer is never sent; the next request is answered, and only it.
        writer.write(encode(RemotingCommand(CANCELLED, opaque=3)))
        await asyncio.sleep(0.1)
        writer.write(encode(RemotingCommand(COROUTINE, opaque=4)))
        answer = await _answer(reader, decoder)
        assert (answer.opaque, answer.code, answer.remark) == (4, ResponseCode.SUCCESS, "from a coroutine")
        writer.close()
    finally:
        await server.close()
