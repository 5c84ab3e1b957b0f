"""nsqd on the store: acknowledged publishes survive SIGKILL; heartbeats; deflate sessions."""

from __future__ import annotations

import asyncio
import threading
import time
import zlib
from pathlib import Path

import orjson
import pytest

from tests.nsq_support import RawNsq, nsqd_in_process
from tests.support import ServerProcess, eventually, free_port, hold_fsync, run
from tidemq.nsq.nsqd.channel import DEADLINE_SLACK
from tidemq.nsq.protocol import FrameParser, FrameType, decode_message, encode_command, encode_mpub
from tidemq.store import FlushMode


async def _publisher_and_subscriber(
    addr: str, topic: str, *, rdy: int, **identify: object
) -> tuple[RawNsq, RawNsq]:
    """A connection to publish on, and one subscribed to ``topic``'s channel "ch" with ``rdy`` credit
    (after an IDENTIFY with ``identify``, when given)."""
    pub = await RawNsq.open(addr)
    sub = await RawNsq.open(addr)
    if identify:
        await sub.identify(**identify)
    await sub.sub(topic, "ch", rdy=rdy)
    return pub, sub


@pytest.mark.e2e
def test_sigkill_then_restart_delivers_every_acknowledged_pub(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", "--flush", "sync").start()
    acked: list[bytes] = []
    finished: set[bytes] = set()

    async def before() -> None:
        pub, sub = await _publisher_and_subscriber(srv.nsqd, "durable", rdy=50)
        for i in range(200):
            if await pub.pub("durable", f"m{i}".encode()) == b"OK":
                acked.append(f"m{i}".encode())
        for _ in range(50):  # FIN half of what the consumer got, leave the rest in flight
            m = await sub.message()
            if int(m.body[1:]) % 2 == 0:
                sub.send("FIN", m.id)
                finished.add(m.body)
        await asyncio.sleep(1.5)  # let the channel cursor be persisted once
        pub.send("PUB", "durable", body=b"last")  # in flight when the process dies
        await asyncio.sleep(0.05)

    try:
        run(before())
        got = set(_crash_and_drain(srv, "durable", quiet=2.0))
        missing = set(acked) - finished - got
        assert not missing, f"{len(missing)} acknowledged messages never came back: {sorted(missing)[:5]}"
    finally:
        assert srv.stop() == 0


def _crash_and_drain(srv: ServerProcess, topic: str, quiet: float = 1.0) -> list[bytes]:
    """SIGKILL the server, start it again (on a new TCP port), and drain channel ``ch``, FINing all."""
    srv.kill()
    srv.nsqd_port = free_port()
    srv.start()

    async def drain() -> list[bytes]:
        sub = await RawNsq.open(srv.nsqd)
        await sub.sub(topic, "ch", rdy=500)
        bodies = await sub.drain(quiet=quiet)
        sub.close()
        return bodies

    result: list[bytes] = run(drain())
    return result


@pytest.mark.e2e
async def test_heartbeats_and_two_missed_disconnect(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data").start()
    try:
        c = await RawNsq.open(srv.nsqd)
        info = await c.identify(heartbeat_interval=1000)
        assert info["max_rdy_count"] == 2500
        ftype, data = await c.frame(timeout=3, skip_heartbeats=False)
        assert (ftype, data) == (FrameType.RESPONSE, b"_heartbeat_")
        c.send("NOP")
        await asyncio.sleep(0.9)
        c.send("NOP")
        t0 = time.monotonic()
        assert await c.closed(timeout=6), "no NOP for two heartbeat intervals: the server hangs up"
        assert time.monotonic() - t0 >= 1.5
        bad = await RawNsq.open(srv.nsqd)
        bad.send("IDENTIFY", body=orjson.dumps({"heartbeat_interval": 10}))
        assert (await bad.error()).startswith(b"E_BAD_BODY")
    finally:
        srv.stop()


@pytest.mark.e2e
async def test_deflate_session(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data").start()
    try:
        host, port = srv.nsqd.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"  V2"
            + encode_command(
                "IDENTIFY",
                body=orjson.dumps({"feature_negotiation": True, "deflate": True, "deflate_level": 3}),
            )
        )
        parser = FrameParser()
        frames: list[tuple[int, bytes]] = []
        raw = b""
        while not frames:
            raw += await asyncio.wait_for(reader.read(65536), 5)
            try:
                frames = parser.feed(raw[: 4 + int.from_bytes(raw[:4], "big")] if len(raw) >= 4 else b"")
            except Exception:
                frames = []
        size = int.from_bytes(raw[:4], "big")
        reply = orjson.loads(raw[8 : 4 + size])
        assert reply["deflate"] is True and reply["deflate_level"] == 3
        inflate = zlib.decompressobj(-15)
        deflate = zlib.compressobj(3, zlib.DEFLATED, -15)
        leftover = raw[4 + size :]
        plain = FrameParser()
        out: list[tuple[int, bytes]] = plain.feed(inflate.decompress(leftover))

        def send(data: bytes) -> None:
            writer.write(deflate.compress(data) + deflate.flush(zlib.Z_SYNC_FLUSH))

        async def next_frame() -> tuple[int, bytes]:
            while not out:
                out.extend(plain.feed(inflate.decompress(await asyncio.wait_for(reader.read(65536), 5))))
            return out.pop(0)

        assert await next_frame() == (FrameType.RESPONSE, b"OK"), "the upgrade OK comes compressed"
        send(encode_command("SUB", "deflated", "ch") + encode_command("RDY", "5"))
        assert await next_frame() == (FrameType.RESPONSE, b"OK")
        send(encode_command("PUB", "deflated", body=b"squeezed " * 100))
        kinds = {}
        for _ in range(2):
            ftype, data = await next_frame()
            kinds[ftype] = data
        assert kinds[FrameType.RESPONSE] == b"OK"
        assert decode_message(kinds[FrameType.MESSAGE]).body == b"squeezed " * 100
        writer.close()
    finally:
        srv.stop()


@pytest.mark.e2e
async def test_sync_flush_answers_pipelined_publishes_in_order_after_one_fsync(tmp_path: Path) -> None:
    """PUBs pipelined on one connection share fsyncs, and every answer still comes in command order:
    the error for a bad PUB arrives after the OKs of the PUBs sent before it."""
    srv = ServerProcess(tmp_path / "data", "--flush", "sync").start()

    try:
        pub = await RawNsq.open(srv.nsqd)
        for i in range(300):
            pub.send("PUB", "piped", body=f"p{i}".encode())
        pub.send_raw(encode_mpub("piped", [b"x", b"y"]))
        answers = [await pub.frame() for _ in range(301)]
        assert answers == [(FrameType.RESPONSE, b"OK")] * 301
        for i in range(5):
            pub.send("PUB", "piped", body=f"q{i}".encode())
        pub.send("PUB", "bad!topic", body=b"z")
        assert [await pub.response() for _ in range(5)] == [b"OK"] * 5
        assert (await pub.error()).startswith(b"E_BAD_TOPIC")
        assert await pub.closed()
        sub = await RawNsq.open(srv.nsqd)
        await sub.sub("piped", "all", rdy=400)
        bodies = [(await sub.message()).body for _ in range(307)]
        assert bodies[:3] == [b"p0", b"p1", b"p2"] and bodies[-5:] == [f"q{i}".encode() for i in range(5)]
        sub.close()
    finally:
        assert srv.stop() == 0


@pytest.mark.e2e
def test_the_snapshot_leaves_the_read_ahead_to_the_cursor(tmp_path: Path) -> None:
    """Messages a channel holds but never delivered are not written out one by one: the snapshot's cursor
    stays before them, and after a restart they are read again from there, once each, in order."""
    srv = ServerProcess(tmp_path / "data", command="nsqd").start()

    async def publish_and_deliver_two() -> None:
        pub, sub = await _publisher_and_subscriber(srv.nsqd, "held", rdy=2)
        assert await pub.mpub("held", [b"%d" % i for i in range(300)]) == b"OK"
        first = [await sub.message() for _ in range(2)]
        sub.send("FIN", first[0].id)  # message 1 stays in flight; the freed credit sends message 2
        await asyncio.sleep(1.5)  # the state is written once a second

    try:
        run(publish_and_deliver_two())
        state = orjson.loads((tmp_path / "data" / "nsq" / "nsqd.json").read_bytes())
        (channel,) = next(t for t in state["topics"] if t["name"] == "held")["channels"]
        assert channel["pending"] == {"1": 1, "2": 1} and channel["next"] == 3
        assert [int(body) for body in _crash_and_drain(srv, "held")] == list(range(1, 300))
    finally:
        assert srv.stop() == 0


@pytest.mark.e2e
def test_a_deferred_message_delivered_inside_the_read_ahead_comes_back_once(tmp_path: Path) -> None:
    """A DPUB released and delivered while the messages around it were still held: after a restart the
    channel reads those again from its cursor, and the deferred one comes back once, not twice."""
    srv = ServerProcess(tmp_path / "data", command="nsqd").start()

    async def before() -> None:
        pub, sub = await _publisher_and_subscriber(srv.nsqd, "held2", rdy=1)
        assert await pub.mpub("held2", [b"m%d" % i for i in range(10)]) == b"OK"
        pub.send("DPUB", "held2", "200", body=b"deferred")
        assert await pub.response() == b"OK"
        assert await pub.mpub("held2", [b"m%d" % i for i in range(11, 50)]) == b"OK"
        first = await sub.message()
        await asyncio.sleep(0.5)  # the deferred message is due now
        sub.send("FIN", first.id)
        assert (await sub.message()).body == b"deferred"  # in flight when the process dies
        await asyncio.sleep(1.5)

    try:
        run(before())
        got = _crash_and_drain(srv, "held2")
        assert sorted(got) == sorted([b"deferred"] + [b"m%d" % i for i in (*range(1, 10), *range(11, 50))])
    finally:
        assert srv.stop() == 0


async def test_sync_flush_stores_a_publish_that_arrives_during_an_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With sync flush a PUB that arrives while an earlier one waits for its fsync is stored (and reaches
    consumers) at once, not after that fsync; both are still answered in order once they are durable."""

    async with nsqd_in_process(tmp_path, FlushMode.SYNC) as nsqd:
        pub, sub = await _publisher_and_subscriber(f"127.0.0.1:{nsqd.tcp_port}", "held", rdy=10)
        release = threading.Event()
        try:
            inside, release = hold_fsync(monkeypatch)
            pub.send("PUB", "held", body=b"first")
            assert await asyncio.to_thread(inside.wait, 10)  # the first one's fsync is under way
            pub.send("PUB", "held", body=b"second")
            assert [(await sub.message()).body for _ in range(2)] == [b"first", b"second"]
            release.set()
            assert [await pub.response() for _ in range(2)] == [b"OK", b"OK"]
        finally:
            release.set()
            monkeypatch.undo()
            sub.close()
            pub.close()


@pytest.mark.e2e
def test_a_channel_saved_past_a_lost_log_tail_goes_on_from_the_log_end(tmp_path: Path) -> None:
    """Power loss with async flush can take the log's unflushed tail after the channel cursor over it was
    saved. The log then goes on from its recovered end, and so must the channel: the state saved by a
    server whose channel read 5 messages (the second still in flight) is put over a log that lost all 5."""
    first = ServerProcess(tmp_path / "first", command="nsqd").start()

    async def read_five() -> None:
        pub, sub = await _publisher_and_subscriber(first.nsqd, "cut", rdy=5)
        assert await pub.mpub("cut", [b"old%d" % i for i in range(5)]) == b"OK"
        for m in [await sub.message() for _ in range(5)]:
            if m.body != b"old1":
                sub.send("FIN", m.id)
        await asyncio.sleep(0.2)

    try:
        run(read_five())
    finally:
        assert first.stop() == 0
    saved = (tmp_path / "first" / "nsq" / "nsqd.json").read_bytes()
    (channel,) = next(t for t in orjson.loads(saved)["topics"] if t["name"] == "cut")["channels"]
    assert channel["next"] == 5 and channel["pending"] == {"1": 1}

    srv = ServerProcess(tmp_path / "second", command="nsqd").start()
    assert srv.stop() == 0  # an empty log for topic "cut", then the saved state over it
    (tmp_path / "second" / "nsq" / "nsqd.json").write_bytes(saved)
    srv.start()

    async def publish_after_restart() -> list[bytes]:
        pub, sub = await _publisher_and_subscriber(srv.nsqd, "cut", rdy=10)
        assert await pub.mpub("cut", [b"new%d" % i for i in range(3)]) == b"OK"
        return await sub.drain(quiet=1.0)

    try:
        assert run(publish_after_restart()) == [b"new0", b"new1", b"new2"]
    finally:
        assert srv.stop() == 0
    assert "was saved at offset 5 but the log ends at 0" in srv.log_path.read_text()


async def test_finished_messages_do_not_pile_up_in_the_deadline_heap(tmp_path: Path) -> None:
    """A FIN leaves the message's timeout deadline in the channel's heap; those leftovers are pruned as
    they accumulate (left to expire, a drain's came due in one burst a minute later and stalled nsqd),
    while the deadline of a message still in flight survives the pruning and times it out."""

    async with nsqd_in_process(tmp_path) as nsqd:
        addr = f"127.0.0.1:{nsqd.tcp_port}"
        pub, sub = await _publisher_and_subscriber(addr, "drain", rdy=100, msg_timeout=1000)
        try:
            assert await pub.mpub("drain", [b"m%d" % i for i in range(3000)]) == b"OK"
            kept = None
            for _ in range(3000):
                m = await sub.message()
                if m.body == b"m0":
                    kept = m
                else:
                    sub.send("FIN", m.id)
            assert kept is not None
            channel = nsqd.topics["drain"].channels["ch"]
            await eventually(lambda: len(channel.in_flight) == 1, what="every FIN but one handled")
            assert len(channel.deadlines) <= 2 + DEADLINE_SLACK < 3000
            again = await sub.message(timeout=10)
            assert (again.body, again.attempts) == (b"m0", 2)
        finally:
            sub.close()
            pub.close()
