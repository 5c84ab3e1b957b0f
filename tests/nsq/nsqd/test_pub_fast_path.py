"""A read that is one whole PUB (what a producer waiting for each OK sends) takes a short path: parsed
without the buffer, its line check remembered, and its OK written before the read returns (no loop pass
later). It must answer exactly as the general path does, and anything else must take the general path."""

from __future__ import annotations

import asyncio
import struct

from tests.nsq.nsqd.connection_support import Transport, fake_nsqd
from tidemq.aio import OutputBuffer
from tidemq.nsq.nsqd.connection import NsqConnection
from tidemq.nsq.protocol import MAGIC_V2, OK, Command, CommandParser, FrameType, encode_frame


def pub(topic: bytes, body: bytes) -> bytes:
    return b"PUB " + topic + b"\n" + struct.pack(">i", len(body)) + body


def started_parser(max_msg_size: int = 100) -> CommandParser:
    parser = CommandParser(max_msg_size=max_msg_size, announce_bodies=True)
    assert list(parser.feed(MAGIC_V2)) == []
    return parser


def test_whole_pub_takes_exactly_one_whole_well_sized_pub() -> None:
    parser = started_parser()
    assert parser.whole_pub(memoryview(pub(b"t", b"abc"))) == Command(b"PUB", [b"t"], b"abc")
    assert parser.whole_pub(pub(b"t.x_y-1#ephemeral", b"x")) == Command(b"PUB", [b"t.x_y-1#ephemeral"], b"x")
    for other in (
        pub(b"t", b"abc")[:-1],  # the body is not all here
        pub(b"t", b"abc") + b"NOP\n",  # more than one command
        pub(b"t", b"abc") * 2,
        pub(b"t\r", b"abc"),  # the general path's line rules
        pub(b"t 5", b"abc"),
        pub(b"", b"abc"),
        pub(b"t" * 80, b"abc"),
        pub(b"t", b"x" * 101),  # over max_msg_size: nsqd's E_BAD_MESSAGE comes from the general path
        b"PUB t\n" + struct.pack(">i", 0),
        b"MPUB t\n" + struct.pack(">ii", 5, 1) + b"a",
        b"DPUB t 5\n" + struct.pack(">i", 1) + b"a",
        b"PUB t",
    ):
        assert parser.whole_pub(other) is None, other


def test_whole_pub_leaves_a_parser_mid_stream_to_feed() -> None:
    assert CommandParser().whole_pub(pub(b"t", b"a")) is None  # the magic is not read yet
    parser = started_parser()
    assert list(parser.feed(b"PUB t\n")) != []  # a body is pending
    assert parser.whole_pub(pub(b"t", b"a")) is None


async def test_a_whole_pub_is_answered_before_the_read_returns() -> None:
    stored: list[tuple[str, list[bytes]]] = []
    nsqd = fake_nsqd()
    nsqd.append = lambda topic, bodies, **kwargs: stored.append((topic, bodies)) or 0
    conn = NsqConnection(nsqd)
    transport = Transport()
    conn.transport = transport  # type: ignore[assignment]
    conn.data_received(memoryview(MAGIC_V2))
    conn.data_received(memoryview(pub(b"t", b"abc")))
    assert stored == [("t", [b"abc"])]
    assert transport.data == encode_frame(FrameType.RESPONSE, OK)  # no loop pass needed
    conn.data_received(memoryview(pub(b"t", b"de")))  # the remembered line
    assert stored[-1] == ("t", [b"de"])
    assert transport.data == 2 * encode_frame(FrameType.RESPONSE, OK)


async def answers(reads: list[bytes]) -> tuple[bytes, bool, int]:
    stored: list[list[bytes]] = []
    nsqd = fake_nsqd()
    nsqd.append = lambda topic, bodies, **kwargs: stored.append(bodies) or 0
    conn = NsqConnection(nsqd)
    transport = Transport()
    conn.transport = transport  # type: ignore[assignment]
    for data in reads:
        conn.data_received(memoryview(data))
    for _ in range(5):
        await asyncio.sleep(0)
    return transport.data, transport.closed, len(stored)


async def test_the_short_path_answers_as_the_general_path_does() -> None:
    for wire in (
        pub(b"t", b"abc"),
        pub(b"b@d", b"abc"),  # E_BAD_TOPIC, fatal
        pub(b"t", b"x" * (1024 * 1024 + 1)),  # E_BAD_MESSAGE message too big
        pub(b"t", b"abc") + pub(b"b@d", b"x"),
    ):
        whole = await answers([MAGIC_V2, wire])
        split = await answers([MAGIC_V2, *(wire[i : i + 1] for i in range(20)), wire[20:]])
        assert whole == split, wire[:20]
    refused = encode_frame(FrameType.ERROR, b'E_BAD_TOPIC PUB topic name "b@d" is not valid')
    after_good = await answers([MAGIC_V2, pub(b"t", b"a"), pub(b"t", b"b"), pub(b"b@d", b"c")])
    assert after_good == (2 * encode_frame(FrameType.RESPONSE, OK) + refused, True, 2)


async def test_a_corked_output_buffer_writes_once_when_uncorked() -> None:
    written: list[bytes] = []
    output = OutputBuffer(lambda data: written.append(bytes(data)))
    assert output.cork()
    output.write(b"a")
    output.write_parts([b"b", b"c"])
    await asyncio.sleep(0)
    assert written == []  # nothing was scheduled while corked
    output.uncork()
    assert written == [b"abc"]
    output.write(b"d")  # uncorked: the next loop pass writes, as before
    assert not output.cork()  # a flush is already scheduled: that one writes
    await asyncio.sleep(0)
    assert written == [b"abc", b"d"]
