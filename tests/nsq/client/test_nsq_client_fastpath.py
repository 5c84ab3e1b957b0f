"""The consumer's per-message fast path: batch frame decoding, FIN blocks, lock-free "first response wins".

Frame parsing is checked against the plain ``feed`` + ``decode_message`` path at every split; the FIN block
order is checked byte for byte against a stand-in nsqd written here (not a tidemq component); response
races and concurrency limits run against a real ``tidemq nsqd``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.nsq_support import RawNsq, publish
from tests.support import ServerProcess, eventually
from tidemq.nsq.client import Consumer, Message
from tidemq.nsq.protocol import (
    MAGIC_V2,
    FrameParser,
    FrameType,
    NSQError,
    decode_message,
    encode_frame,
    encode_message,
)

Decoded = tuple[str, Any]


async def nothing_left(addr: str, topic: str, channel: str) -> bool:
    """No message (new, requeued or timed out) reaches a fresh subscriber of the channel."""
    sub = await RawNsq.open(addr)
    await sub.sub(topic, channel, rdy=100)
    try:
        await sub.message(timeout=1.5)  # past the fixture's 1 s in-flight timeout
    except TimeoutError:
        return True
    finally:
        sub.close()
    return False


def _make(msg_id: bytes, body: bytes, timestamp: int, attempts: int, tag: str) -> Decoded:
    return (tag, (msg_id, body, timestamp, attempts))


def _stream(kinds: list[int]) -> tuple[bytes, list[Decoded]]:
    """Frames of the given kinds (0 response, 1 error, 2 message) and what each should decode to."""
    out: list[bytes] = []
    expected: list[Decoded] = []
    for i, kind in enumerate(kinds):
        if kind == FrameType.MESSAGE:
            msg_id, body = b"%016x" % i, b"body-%d" % i * (i % 5)
            out.append(encode_message(1_700_000_000_000_000_000 + i, i % 7 + 1, msg_id, body))
            expected.append(("msg", (msg_id, body, 1_700_000_000_000_000_000 + i, i % 7 + 1)))
        else:
            data = b"_heartbeat_" if kind == FrameType.RESPONSE else b"E_FIN_FAILED x %d" % i
            out.append(encode_frame(kind, data))
            expected.append(("frame", (kind, data)))
    return b"".join(out), expected


def _replay(parser: FrameParser, chunks: list[bytes]) -> list[Decoded]:
    """Feed ``chunks`` through ``feed_messages`` and put messages and other frames back in stream order."""
    seen: list[Decoded] = []
    for chunk in chunks:
        messages, others = parser.feed_messages(chunk, _make, "msg")
        done = 0
        for before, kind, data in others:
            seen.extend(messages[done:before])
            done = before
            seen.append(("frame", (kind, data)))
        seen.extend(messages[done:])
    return seen


@settings(max_examples=200, deadline=None)
@given(
    kinds=st.lists(st.sampled_from([0, 1, 2, 2, 2]), min_size=1, max_size=30),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
)
def test_feed_messages_matches_feed_at_any_split(kinds: list[int], cuts: list[int]) -> None:
    stream, expected = _stream(kinds)
    bounds = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    chunks = [stream[a:b] for a, b in itertools.pairwise(bounds)]
    assert _replay(FrameParser(), chunks) == expected
    plain = FrameParser()
    reference: list[Decoded] = []
    for chunk in chunks:
        for kind, data in plain.feed(chunk):
            if kind == FrameType.MESSAGE:
                m = decode_message(data)
                reference.append(("msg", (m.id, m.body, m.timestamp, m.attempts)))
            else:
                reference.append(("frame", (kind, data)))
    assert reference == expected


def test_one_byte_reads_and_a_large_frame_over_many_reads() -> None:
    stream, expected = _stream([2, 0, 2, 1, 2])
    assert _replay(FrameParser(), [stream[i : i + 1] for i in range(len(stream))]) == expected
    big = bytes(range(256)) * 12_000  # ~3 MiB
    frame = encode_message(5, 1, b"b" * 16, big)
    parser = FrameParser()
    pieces = [frame[i : i + 4096] for i in range(0, len(frame), 4096)]
    for piece in pieces[:-1]:
        assert parser.feed_messages(piece, _make, "msg") == ([], [])
    assert parser.feed_messages(pieces[-1] + encode_frame(0, b"OK"), _make, "msg") == (
        [("msg", (b"b" * 16, big, 5, 1))],
        [(1, FrameType.RESPONSE, b"OK")],
    )


def test_bad_frames_are_refused() -> None:
    with pytest.raises(NSQError, match="out of range") as info:
        FrameParser(max_frame=1000).feed_messages(encode_frame(0, b"x" * 1000), _make, "msg")
    assert info.value.code == "E_BAD_FRAME"
    with pytest.raises(NSQError, match="out of range"):
        FrameParser().feed(b"\x00\x00\x00\x02\x00\x00\x00\x00")
    short = encode_frame(FrameType.MESSAGE, b"x" * 25)
    with pytest.raises(NSQError, match="shorter than 26") as info:
        FrameParser().feed_messages(short + b"\x00" * 40, _make, "msg")
    assert info.value.code == "E_BAD_MESSAGE"


async def test_fins_go_out_as_one_block_in_order_with_rdy_and_req() -> None:
    """FIN 1, then the backoff's RDY 0 before REQ 2, then FIN 3: the order the responses were given."""
    ids = [b"%016d" % i for i in (1, 2, 3)]
    sent: list[bytes] = []

    async def nsqd(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert await reader.readexactly(4) == MAGIC_V2
        assert await reader.readline() == b"IDENTIFY\n"
        await reader.readexactly(int.from_bytes(await reader.readexactly(4), "big"))
        writer.write(encode_frame(FrameType.RESPONSE, orjson.dumps({"max_rdy_count": 2500})))
        sent.append(await reader.readline())
        sent.append(await reader.readline())
        writer.write(b"".join(encode_message(1, 1, msg_id, b"m") for msg_id in ids))
        for _ in range(4):
            sent.append(await asyncio.wait_for(reader.readline(), 10))
        writer.close()

    server = await asyncio.start_server(nsqd, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]

    async def handler(message: Message) -> None:
        if message.id == ids[1]:
            raise RuntimeError("fail the second one")

    consumer = Consumer("t", "c", max_in_flight=3, default_requeue_delay=0.0, backoff_multiplier=5.0)
    consumer.add_handler(handler)
    try:
        await consumer.connect_to_nsqd(f"127.0.0.1:{port}")
        await eventually(lambda: len(sent) == 6, what="all responses")
    finally:
        await consumer.stop(timeout=2)
        server.close()
    assert sent == [
        b"SUB t c\n",
        b"RDY 3\n",
        b"FIN " + ids[0] + b"\n",
        b"RDY 0\n",
        b"REQ " + ids[1] + b" 0\n",
        b"FIN " + ids[2] + b"\n",
    ]


@pytest.mark.e2e
async def test_two_responses_reaching_the_consumer_are_written_once(
    nsqd: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """Two threads that both got past ``has_responded`` (a race) hand the consumer a FIN and a REQ for the
    same message at once, and the loop answers it twice more: nsqd hears exactly one response."""
    bodies = [b"race-%d" % i for i in range(100)]

    with caplog.at_level(logging.WARNING, logger="tidemq.nsq.client"):
        raced: set[bytes] = set()
        consumer = Consumer("race", "ch", max_in_flight=16)

        def race(message: Message) -> None:
            barrier = threading.Barrier(2)

            def finish() -> None:
                barrier.wait()
                consumer.on_finish(message)

            def requeue() -> None:
                barrier.wait()
                consumer.on_requeue(message, 0, False)

            threads = [threading.Thread(target=finish), threading.Thread(target=requeue)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        async def handler(message: Message) -> None:
            message.disable_auto_response()
            if message.attempts > 1:
                message.finish()
                return
            await asyncio.to_thread(race, message)
            consumer.on_finish(message)
            consumer.on_requeue(message, 0, True)
            raced.add(message.body)

        consumer.add_handler(handler, concurrency=8)
        await consumer.connect_to_nsqd(nsqd.nsqd)
        await publish(nsqd.nsqd, "race", bodies)
        await eventually(lambda: len(raced) == len(bodies), timeout=20, what="every message raced")
        await eventually(
            lambda: consumer.stats().messages_finished == len(bodies), timeout=20, what="all finished"
        )
        await asyncio.sleep(0.3)
        stats = consumer.stats()
        assert stats.messages_finished == len(bodies)
        assert stats.messages_received == len(bodies) + stats.messages_requeued
        assert not consumer._rdy.in_backoff, "a duplicate REQ with backoff was counted"
        await consumer.stop()
        assert await nothing_left(nsqd.nsqd, "race", "ch")
    assert not [r for r in caplog.records if "protocol error" in r.getMessage()]


@pytest.mark.e2e
async def test_concurrency_is_a_limit_and_is_reached(nsqd: ServerProcess) -> None:
    """Handlers that suspend run ``concurrency`` at a time, never more, as the old worker pool did."""

    running = 0
    peak = 0
    done = 0

    async def handler(message: Message) -> None:
        nonlocal running, peak, done
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1
        done += 1

    await publish(nsqd.nsqd, "conc", [b"c%d" % i for i in range(60)])
    consumer = Consumer("conc", "ch", max_in_flight=20)
    consumer.add_handler(handler, concurrency=3)
    await consumer.connect_to_nsqd(nsqd.nsqd)
    await eventually(lambda: done == 60, timeout=20, what="all handled")
    await consumer.stop()
    assert peak == 3
    assert consumer.stats().messages_finished == 60
