"""Every verb in every connection state gets the answer nsqd gives, driven without a socket.

The expected answers are spelled out here independently of ``VERBS``: a refusal is the fatal
``E_INVALID cannot <VERB> in current state``, byte for byte as tests/nsqd_error_cases.py pins it against
the real nsqd.
"""

from __future__ import annotations

import asyncio
import struct

from tests.nsq.nsqd.connection_support import Channel, Transport, fake_nsqd
from tidemq.nsq.nsqd.connection import NsqConnection
from tidemq.nsq.nsqd.verbs import VERBS, State
from tidemq.nsq.protocol import CLOSE_WAIT, MAGIC_V2, OK, FrameType, encode_frame

ID = b"0" * 16
#: Each verb's wire form (bodies where it takes one).
WIRE = {
    b"IDENTIFY": b"IDENTIFY\n" + struct.pack(">i", 2) + b"{}",
    b"AUTH": b"AUTH\n" + struct.pack(">i", 6) + b"secret",
    b"SUB": b"SUB t c\n",
    b"PUB": b"PUB t\n" + struct.pack(">i", 1) + b"x",
    b"MPUB": b"MPUB t\n" + struct.pack(">iii", 9, 1, 1) + b"x",
    b"DPUB": b"DPUB t 10\n" + struct.pack(">i", 1) + b"x",
    b"RDY": b"RDY 1\n",
    b"FIN": b"FIN " + ID + b"\n",
    b"REQ": b"REQ " + ID + b" 0\n",
    b"TOUCH": b"TOUCH " + ID + b"\n",
    b"CLS": b"CLS\n",
    b"NOP": b"NOP\n",
}
#: Where each verb is refused; RDY is dropped silently after CLS.
REFUSED = {
    b"IDENTIFY": {State.SUBSCRIBED, State.CLOSING},
    b"AUTH": {State.SUBSCRIBED, State.CLOSING},
    b"SUB": {State.SUBSCRIBED, State.CLOSING},
    b"RDY": {State.INIT},
    b"FIN": {State.INIT},
    b"REQ": {State.INIT},
    b"TOUCH": {State.INIT},
    b"CLS": {State.INIT, State.CLOSING},
}
INLINE = {b"PUB", b"MPUB", b"DPUB", b"RDY", b"FIN", b"REQ", b"TOUCH", b"CLS", b"NOP"}


async def answer(verb: bytes, state: State) -> tuple[bytes, bool]:
    conn = NsqConnection(fake_nsqd())
    transport = Transport()
    conn.transport = transport  # type: ignore[assignment]
    conn.state = state
    if state is not State.INIT:
        conn.channel = Channel()  # type: ignore[assignment]
    conn.data_received(memoryview(MAGIC_V2 + WIRE[verb]))
    for _ in range(5):
        await asyncio.sleep(0)
    return transport.data, transport.closed


def frame(frame_type: FrameType, data: bytes) -> bytes:
    return encode_frame(frame_type, data)


def expected(verb: bytes, state: State) -> tuple[bytes, bool] | None:
    """The answer and whether the connection closes; None: a prefix check of its own below."""
    if state in REFUSED.get(verb, ()):
        return frame(FrameType.ERROR, b"E_INVALID cannot " + verb + b" in current state"), True
    if verb in (b"RDY", b"NOP"):
        return b"", False
    if verb == b"AUTH":  # past the state check: no auth server is configured
        return frame(FrameType.ERROR, b"E_AUTH_DISABLED AUTH disabled"), True
    if verb == b"CLS":
        return frame(FrameType.RESPONSE, CLOSE_WAIT), False
    if verb in (b"FIN", b"REQ", b"TOUCH"):  # past the state check: the channel refuses, not fatally
        return None
    return frame(FrameType.RESPONSE, OK), False  # IDENTIFY without feature negotiation, SUB, publishes


def test_every_verb_in_every_state() -> None:
    async def run() -> None:
        for verb in WIRE:
            for state in State:
                data, closed = await answer(verb, state)
                want = expected(verb, state)
                if want is None:
                    problem = verb + b" " + ID + b" failed ID not in flight"
                    code = b"E_" + verb + b"_FAILED "
                    assert (data, closed) == (frame(FrameType.ERROR, code + problem), False), (verb, state)
                else:
                    assert (data, closed) == want, (verb, state)

    asyncio.run(run())


def test_the_table_is_nsqds() -> None:
    assert set(VERBS) == set(WIRE)
    for verb, rule in VERBS.items():
        assert rule.inline == (verb in INLINE), verb
        assert set(State) - rule.allowed - rule.ignored == REFUSED.get(verb, set()), verb
    assert [int(s) for s in State] == [0, 3, 4]  # nsqd's numbers, shown by /stats
