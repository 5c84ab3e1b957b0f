"""The command parser's events: it calls nothing back, it says a body is ahead and waits for the caller."""

from __future__ import annotations

import struct

from tidemq.nsq.protocol import MAGIC_V2, BodyAhead, Command, CommandParser, FinRun, NSQError

ID = b"0123456789abcdef"
WIRE = MAGIC_V2 + b"NOP\nPUB t\n" + struct.pack(">i", 3) + b"abc" + b"FIN " + ID + b"\nRDY 5\r\n"
Item = Command | FinRun | NSQError | BodyAhead


def events(parser: CommandParser, reads: list[bytes]) -> list[Item]:
    out: list[Item] = []
    for data in reads:
        out += parser.feed(data)
    return out


def test_a_body_command_is_announced_then_comes_whole() -> None:
    whole = events(CommandParser(announce_bodies=True), [WIRE])
    assert whole == [
        Command(b"NOP", []),
        BodyAhead(Command(b"PUB", [b"t"], b"abc")),  # the same command, whose body was read since
        Command(b"PUB", [b"t"], b"abc"),
        FinRun([ID]),
        Command(b"RDY", [b"5"]),
    ]
    split = events(CommandParser(announce_bodies=True), [WIRE[i : i + 1] for i in range(len(WIRE))])
    assert split[:1] + split[2:] == whole[:1] + whole[2:]
    assert isinstance(split[1], BodyAhead) and split[1].command.name == b"PUB"


def test_the_announcement_comes_before_the_body_arrives() -> None:
    parser = CommandParser(announce_bodies=True)
    (ahead,) = events(parser, [MAGIC_V2 + b"PUB t\n"])
    assert isinstance(ahead, BodyAhead) and ahead.command == Command(b"PUB", [b"t"])
    assert events(parser, [struct.pack(">i", 1)]) == []
    assert events(parser, [b"x"]) == [Command(b"PUB", [b"t"], b"x")]


def test_a_refused_body_command_ends_parsing() -> None:
    parser = CommandParser(announce_bodies=True)
    out: list[Item] = []
    for item in parser.feed(MAGIC_V2 + b"PUB t\n" + struct.pack(">i", 1) + b"xNOP\n"):
        out.append(item)
        if isinstance(item, BodyAhead):
            parser.refuse()
    assert [type(item) for item in out] == [BodyAhead]
    assert parser.broken and events(parser, [b"NOP\n"]) == []


def test_without_announcements_bodies_are_read_at_once() -> None:
    assert events(CommandParser(), [WIRE]) == [
        Command(b"NOP", []),
        Command(b"PUB", [b"t"], b"abc"),
        FinRun([ID]),
        Command(b"RDY", [b"5"]),
    ]


def test_an_oversized_body_is_refused_without_reading_it() -> None:
    parser = CommandParser(max_body_size=100, max_msg_size=10, announce_bodies=True)
    out = events(parser, [MAGIC_V2 + b"PUB t\n" + struct.pack(">i", 11)])
    assert isinstance(out[0], BodyAhead)
    (err,) = out[1:]
    assert isinstance(err, NSQError) and err.payload == b"E_BAD_MESSAGE PUB message too big 11 > 10"
    assert parser.broken
    mpub = CommandParser(max_body_size=100, max_msg_size=10)
    (err,) = events(mpub, [MAGIC_V2 + b"MPUB t\n", struct.pack(">i", 101)])
    assert isinstance(err, NSQError) and err.payload == b"E_BAD_BODY MPUB body too big 101 > 100"
