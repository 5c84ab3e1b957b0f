"""nsqlookupd: the registration DB with an injected clock, and a real ``tidemq nsqlookupd`` over TCP/HTTP."""

from __future__ import annotations

import socket
import struct
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.nsq_support import LookupdProcess
from tests.support import ServerProcess, wait_for
from tidemq.nsq.client import parse_duration as parse_go_duration
from tidemq.nsq.lookupd import PeerInfo, RegistrationDB
from tidemq.nsq.lookupd.tcp import LookupCommand, LookupParser
from tidemq.nsq.protocol import NSQError

V1 = "nsq; version=1.0"
PEER_FIELDS = [
    "remote_address",
    "hostname",
    "broadcast_address",
    "tcp_port",
    "http_port",
    "version",
]
IDENTITY = {
    "version": "1.3.0",
    "tcp_port": 4150,
    "http_port": 4151,
    "hostname": "nsqd-host",
    "broadcast_address": "127.0.0.1",
}


# --- helpers ------------------------------------------------------------------------------------------


def http(url: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def get_json(url: str) -> Any:
    status, headers, body = http(url)
    assert status == 200, (status, body)
    assert headers["X-NSQ-Content-Type"] == V1
    assert headers["Content-Type"] == "application/json; charset=utf-8"
    return orjson.loads(body)


def assert_error(url: str, method: str, status: int, message: str) -> None:
    got, headers, body = http(url, method)
    assert (got, orjson.loads(body)) == (status, {"message": message})
    assert headers["X-NSQ-Content-Type"] == V1
    assert headers["Content-Type"] == "application/json; charset=utf-8"


def post_ok(url: str) -> None:
    status, headers, body = http(url, "POST")
    assert (status, body) == (200, b""), body
    assert headers["X-NSQ-Content-Type"] == V1


class RawLookup:
    """A blocking lookupd V1 client: commands out, ``[size][data]`` replies in."""

    def __init__(self, addr: str, magic: bytes = b"  V1") -> None:
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.sock.sendall(magic)

    @property
    def local_address(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"{host}:{port}"

    def send(self, line: str, body: bytes | None = None) -> None:
        data = line.encode() + b"\n"
        if body is not None:
            data += struct.pack(">i", len(body)) + body
        self.sock.sendall(data)

    def _exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return out

    def reply(self) -> bytes:
        (size,) = struct.unpack(">i", self._exact(4))
        return self._exact(size)

    def call(self, line: str, body: bytes | None = None) -> bytes:
        self.send(line, body)
        return self.reply()

    def identify(self, **fields: Any) -> dict[str, Any]:
        answer = self.call("IDENTIFY", orjson.dumps({**IDENTITY, **fields}))
        return orjson.loads(answer)  # type: ignore[no-any-return]

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def fatal(self, line: str, body: bytes | None = None) -> bytes:
        """Send a command that must fail: its error reply, after which the server must have closed."""
        answer = self.call(line, body)
        assert self.closed(), answer
        return answer

    def close(self) -> None:
        self.sock.close()


# --- registration DB, with a clock we move by hand -----------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make_peer(pid: str, http_port: int = 4151) -> PeerInfo:
    return PeerInfo(pid, pid, "h", "10.0.0.1", 4150, http_port, "1.3.0")


def test_registry_inactive_producers_are_hidden_until_they_ping() -> None:
    clock = Clock()
    db = RegistrationDB(inactive_producer_timeout_s=300.0, now=clock)
    peer = make_peer("p1")
    db.identify(peer)
    db.register(peer, "t", "c")
    clock.t += 299.0
    assert db.lookup("t") == (["c"], [peer])
    assert [n["remote_address"] for n in db.nodes()] == ["p1"]
    clock.t += 2.0
    assert db.lookup("t") == (["c"], [])
    assert db.nodes() == []
    assert db.topics() == ["t"]
    db.touch(peer)
    assert db.lookup("t") == (["c"], [peer])
    assert len(db.nodes()) == 1


def test_registry_tombstone_hides_from_lookup_until_it_expires() -> None:
    clock = Clock()
    db = RegistrationDB(tombstone_lifetime_s=45.0, now=clock)
    a, b = make_peer("a", 4151), make_peer("b", 5151)
    for peer in (a, b):
        db.identify(peer)
        db.register(peer, "t", None)
        db.register(peer, "other", None)
    assert db.tombstone("t", "10.0.0.1:4151") == 1
    assert db.tombstone("t", "10.0.0.1:9999") == 0
    clock.t += 44.0
    assert db.lookup("t") == ([], [b])
    assert {p.id for p in db.lookup("other")[1]} == {"a", "b"}  # type: ignore[index]
    node_a = next(n for n in db.nodes() if n["remote_address"] == "a")
    assert dict(zip(node_a["topics"], node_a["tombstones"], strict=True)) == {"t": True, "other": False}
    db.register(a, "t", None)  # re-registering keeps the tombstone; it only expires
    assert db.lookup("t") == ([], [b])
    clock.t += 2.0
    assert {p.id for p in db.lookup("t")[1]} == {"a", "b"}  # type: ignore[index]
    node_a = next(n for n in db.nodes() if n["remote_address"] == "a")
    assert node_a["tombstones"] == [False, False]


def test_registry_unregister_and_ephemeral_keys() -> None:
    db = RegistrationDB(now=Clock())
    p, q = make_peer("p"), make_peer("q")
    db.identify(p)
    db.identify(q)
    db.register(p, "t", "c")
    db.register(p, "t", "e#ephemeral")
    db.register(q, "t", "e#ephemeral")
    db.unregister(p, "t", "e#ephemeral")
    assert sorted(db.channels("t")) == ["c", "e#ephemeral"]  # q still has it
    db.unregister(q, "t", "e#ephemeral")
    assert db.channels("t") == ["c"]
    db.unregister(p, "t", "c")
    assert db.channels("t") == ["c"]  # a durable key stays without producers
    assert db.lookup("t") == (["c"], [p, q])  # REGISTER T C registered both for the topic as well
    db.register(p, "t", "c")
    db.unregister(p, "t", None)  # a topic unregister takes the peer out of its channels too
    assert db.find_producers("channel", "t", "*") == []
    assert db.lookup("t") == (["c"], [q])
    db.register(p, "x#ephemeral", "c")
    db.unregister(p, "x#ephemeral", None)
    assert db.lookup("x#ephemeral") is None
    assert "x#ephemeral" not in db.topics()


def test_registry_disconnect_keeps_keys_and_http_admin() -> None:
    db = RegistrationDB(now=Clock())
    p = make_peer("p")
    db.identify(p)
    db.register(p, "t", "c#ephemeral")
    db.disconnect("p")
    assert db.topics() == ["t"] and db.channels("t") == ["c#ephemeral"]
    assert db.lookup("t") == (["c#ephemeral"], [])
    assert db.nodes() == []
    db.create_channel("u", "c1")
    db.create_channel("u", "c2")
    assert sorted(db.topics()) == ["t", "u"]
    assert db.delete_channel("u", "c1") is True
    assert db.delete_channel("u", "c1") is False
    db.delete_topic("u")
    assert db.topics() == ["t"] and db.channels("u") == []


# --- sans-IO parser --------------------------------------------------------------------------------------


def test_parser_handles_split_input_and_bounds_the_body() -> None:
    parser = LookupParser()
    wire = b"  V1PING\nIDENTIFY\n" + struct.pack(">i", 2) + b"{}" + b"REGISTER t c\r\n"
    items: list[LookupCommand | NSQError] = []
    for i in range(len(wire)):
        items += parser.feed(wire[i : i + 1])
    assert items == [
        LookupCommand("PING", []),
        LookupCommand("IDENTIFY", [], b"{}"),
        LookupCommand("REGISTER", ["t", "c"]),
    ]
    big = LookupParser()
    (err,) = big.feed(b"  V1IDENTIFY\n" + struct.pack(">i", 2 * 1024 * 1024))
    assert isinstance(err, NSQError) and err.code == "E_BAD_BODY"
    assert list(big.feed(b"PING\n")) == []  # nothing after a fatal error
    (bad,) = LookupParser().feed(b"GET / HTTP/1.1\r\n")
    assert isinstance(bad, NSQError) and bad.code == "E_BAD_PROTOCOL"


def test_go_durations() -> None:
    assert parse_go_duration("300s") == 300.0
    assert parse_go_duration("5m") == 300.0
    assert parse_go_duration("1h30m") == 5400.0
    assert parse_go_duration("100ms") == pytest.approx(0.1)
    assert parse_go_duration("1.5s") == 1.5
    assert parse_go_duration("0") == 0.0
    for bad in ("", "5", "5x", "s", "1h 30m"):
        with pytest.raises(ValueError):
            parse_go_duration(bad)


# --- the real server: TCP ---------------------------------------------------------------------------------


@pytest.mark.e2e
def test_identify_register_lookup_and_close(lookupd: LookupdProcess) -> None:
    conn = RawLookup(lookupd.tcp)
    assert conn.call("PING") == b"OK"  # allowed before IDENTIFY
    info = conn.identify(topology_zone="z1")
    assert info["tcp_port"] == lookupd.tcp_port and info["http_port"] == lookupd.http_port
    assert info["version"] == "1.3.0" and info["broadcast_address"] == "127.0.0.1"
    assert info["hostname"] == socket.gethostname()
    assert conn.call("REGISTER tcp_t ch") == b"OK"
    assert conn.call("REGISTER tcp_t2") == b"OK"
    assert conn.call("PING") == b"OK"

    found = get_json(f"{lookupd.http}/lookup?topic=tcp_t")
    assert found["channels"] == ["ch"]
    (producer,) = found["producers"]
    assert list(producer) == PEER_FIELDS
    assert producer == {
        "remote_address": conn.local_address,
        "hostname": "nsqd-host",
        "broadcast_address": "127.0.0.1",
        "tcp_port": 4150,
        "http_port": 4151,
        "version": "1.3.0",
    }
    assert get_json(f"{lookupd.http}/channels?topic=tcp_t") == {"channels": ["ch"]}
    assert {"tcp_t", "tcp_t2"} <= set(get_json(f"{lookupd.http}/topics")["topics"])
    node = next(
        n for n in get_json(f"{lookupd.http}/nodes")["producers"] if n["remote_address"] == conn.local_address
    )
    assert list(node) == [*PEER_FIELDS, "tombstones", "topics"]
    assert sorted(node["topics"]) == ["tcp_t", "tcp_t2"] and node["tombstones"] == [False, False]
    debug = get_json(f"{lookupd.http}/debug")
    (entry,) = debug["channel:tcp_t:ch"]
    assert entry["id"] == conn.local_address and entry["tombstoned"] is False and entry["last_update"] > 0

    assert conn.call("UNREGISTER tcp_t ch") == b"OK"
    assert get_json(f"{lookupd.http}/lookup?topic=tcp_t")["channels"] == ["ch"]  # durable: key stays
    assert conn.call("UNREGISTER tcp_t") == b"OK"
    assert get_json(f"{lookupd.http}/lookup?topic=tcp_t")["producers"] == []

    conn.close()  # closing removes the producer from every key, but the keys stay
    wait_for(lambda: get_json(f"{lookupd.http}/lookup?topic=tcp_t2")["producers"] == [])
    assert "tcp_t2" in get_json(f"{lookupd.http}/topics")["topics"]
    assert all(
        n["remote_address"] != conn.local_address for n in get_json(f"{lookupd.http}/nodes")["producers"]
    )


@pytest.mark.e2e
def test_ephemeral_registrations_vanish_with_their_last_producer(lookupd: LookupdProcess) -> None:
    conn = RawLookup(lookupd.tcp)
    conn.identify()
    assert conn.call("REGISTER eph_t c#ephemeral") == b"OK"
    assert conn.call("REGISTER eph#ephemeral") == b"OK"
    assert get_json(f"{lookupd.http}/channels?topic=eph_t") == {"channels": ["c#ephemeral"]}
    assert conn.call("UNREGISTER eph_t c#ephemeral") == b"OK"
    assert get_json(f"{lookupd.http}/channels?topic=eph_t") == {"channels": []}
    assert conn.call("UNREGISTER eph#ephemeral") == b"OK"
    assert_error(f"{lookupd.http}/lookup?topic=eph%23ephemeral", "GET", 404, "TOPIC_NOT_FOUND")
    conn.close()


@pytest.mark.e2e
def test_a_fatal_error_drops_the_peer_registrations(lookupd: LookupdProcess) -> None:
    conn = RawLookup(lookupd.tcp)
    conn.identify()
    assert conn.call("REGISTER fatal_t") == b"OK"
    assert len(get_json(f"{lookupd.http}/lookup?topic=fatal_t")["producers"]) == 1
    assert conn.fatal("REGISTER fatal_t bad/channel").startswith(b"E_BAD_CHANNEL")
    wait_for(lambda: get_json(f"{lookupd.http}/lookup?topic=fatal_t")["producers"] == [])


BAD_COMMANDS = [
    ("REGISTER t", None, b"E_INVALID client must IDENTIFY"),
    ("UNREGISTER t", None, b"E_INVALID client must IDENTIFY"),
    ("IDENTIFY", b"{not json", b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    ("IDENTIFY", b"", b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    ("IDENTIFY", b"[1, 2]", b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    ("IDENTIFY", orjson.dumps({**IDENTITY, "tcp_port": "4150"}), b"E_BAD_BODY IDENTIFY failed to decode"),
    ("IDENTIFY", orjson.dumps({**IDENTITY, "broadcast_address": ""}), b"E_BAD_BODY IDENTIFY missing fields"),
    ("IDENTIFY", orjson.dumps({**IDENTITY, "http_port": 0}), b"E_BAD_BODY IDENTIFY missing fields"),
    ("IDENTIFY", orjson.dumps({"tcp_port": 1, "http_port": 2, "broadcast_address": "x"}), b"E_BAD_BODY"),
    ("FOO bar", None, b"E_INVALID invalid command FOO"),
    ("", None, b"E_INVALID invalid command "),
]


@pytest.mark.e2e
@pytest.mark.parametrize(("line", "body", "expected"), BAD_COMMANDS)
def test_bad_commands_are_fatal(
    lookupd: LookupdProcess, line: str, body: bytes | None, expected: bytes
) -> None:
    conn = RawLookup(lookupd.tcp)
    assert conn.fatal(line, body).startswith(expected)


IDENTIFIED_BAD_COMMANDS = [
    ("IDENTIFY", b"E_INVALID cannot IDENTIFY again"),  # refused on its line alone, no body needed
    ("REGISTER", b"E_INVALID REGISTER insufficient number of params"),
    ("UNREGISTER", b"E_INVALID UNREGISTER insufficient number of params"),
    ("REGISTER bad!topic", b"E_BAD_TOPIC REGISTER topic name 'bad!topic' is not valid"),
    ("REGISTER " + "x" * 65, b"E_BAD_TOPIC"),
    ("UNREGISTER t bad!channel", b"E_BAD_CHANNEL UNREGISTER channel name 'bad!channel' is not valid"),
    ("REGISTER t " + "c" * 65, b"E_BAD_CHANNEL"),
]


@pytest.mark.e2e
@pytest.mark.parametrize(("line", "expected"), IDENTIFIED_BAD_COMMANDS)
def test_bad_commands_after_identify_are_fatal(lookupd: LookupdProcess, line: str, expected: bytes) -> None:
    conn = RawLookup(lookupd.tcp)
    conn.identify()
    assert conn.fatal(line).startswith(expected)


@pytest.mark.e2e
def test_bad_magic_oversized_body_and_long_line(lookupd: LookupdProcess) -> None:
    conn = RawLookup(lookupd.tcp, magic=b"  V2")
    assert conn.reply() == b"E_BAD_PROTOCOL"
    assert conn.closed()
    conn = RawLookup(lookupd.tcp)
    conn.sock.sendall(b"IDENTIFY\n" + struct.pack(">i", 64 * 1024 * 1024))  # refused before any body
    assert conn.reply().startswith(b"E_BAD_BODY")
    assert conn.closed()
    conn = RawLookup(lookupd.tcp)
    conn.sock.sendall(b"IDENTIFY\n" + struct.pack(">i", -1))
    assert conn.reply().startswith(b"E_BAD_BODY")
    conn = RawLookup(lookupd.tcp)
    conn.sock.sendall(b"P" * 20_000)
    assert conn.reply().startswith(b"E_INVALID")
    assert conn.closed()
    assert http(f"{lookupd.http}/ping")[2] == b"OK"  # the server is unharmed


# --- the real server: HTTP --------------------------------------------------------------------------------


@pytest.mark.e2e
def test_ping_info_and_routing_errors(lookupd: LookupdProcess) -> None:
    status, headers, body = http(f"{lookupd.http}/ping")
    assert (status, body) == (200, b"OK") and "X-NSQ-Content-Type" not in headers
    assert get_json(f"{lookupd.http}/info") == {"version": "1.3.0"}
    assert_error(f"{lookupd.http}/nope", "GET", 404, "NOT_FOUND")
    assert_error(f"{lookupd.http}/topic/create?topic=x", "GET", 405, "METHOD_NOT_ALLOWED")
    assert_error(f"{lookupd.http}/lookup?topic=x", "POST", 405, "METHOD_NOT_ALLOWED")
    assert_error(f"{lookupd.http}/ping", "POST", 405, "METHOD_NOT_ALLOWED")
    assert_error(f"{lookupd.http}/lookup?topic=%zz", "GET", 400, "INVALID_REQUEST")


@pytest.mark.e2e
def test_topic_create_lookup_and_delete(lookupd: LookupdProcess) -> None:
    base = lookupd.http
    assert_error(f"{base}/topic/create", "POST", 400, "MISSING_ARG_TOPIC")
    assert_error(f"{base}/topic/create?topic=bad!", "POST", 400, "INVALID_ARG_TOPIC")
    assert_error(f"{base}/topic/create?topic=", "POST", 400, "INVALID_ARG_TOPIC")
    assert_error(f"{base}/lookup", "GET", 400, "MISSING_ARG_TOPIC")
    assert_error(f"{base}/lookup?topic=http_t", "GET", 404, "TOPIC_NOT_FOUND")
    assert_error(f"{base}/channels", "GET", 400, "MISSING_ARG_TOPIC")
    post_ok(f"{base}/topic/create?topic=http_t")
    assert get_json(f"{base}/lookup?topic=http_t") == {"channels": [], "producers": []}
    assert "http_t" in get_json(f"{base}/topics")["topics"]
    assert get_json(f"{base}/channels?topic=http_t") == {"channels": []}

    post_ok(f"{base}/channel/create?topic=http_t&channel=c1")
    post_ok(f"{base}/channel/create?topic=http_t2&channel=c2")  # creates the topic too
    assert get_json(f"{base}/lookup?topic=http_t")["channels"] == ["c1"]
    assert "http_t2" in get_json(f"{base}/topics")["topics"]

    assert_error(f"{base}/topic/delete", "POST", 400, "MISSING_ARG_TOPIC")
    post_ok(f"{base}/topic/delete?topic=never_there")
    post_ok(f"{base}/topic/delete?topic=http_t")
    assert "http_t" not in get_json(f"{base}/topics")["topics"]
    assert get_json(f"{base}/channels?topic=http_t") == {"channels": []}
    assert_error(f"{base}/lookup?topic=http_t", "GET", 404, "TOPIC_NOT_FOUND")


@pytest.mark.e2e
def test_channel_create_and_delete(lookupd: LookupdProcess) -> None:
    base = lookupd.http
    assert_error(f"{base}/channel/create?channel=c", "POST", 400, "MISSING_ARG_TOPIC")
    assert_error(f"{base}/channel/create?topic=a!&channel=c", "POST", 400, "INVALID_ARG_TOPIC")
    assert_error(f"{base}/channel/create?topic=ch_t", "POST", 400, "MISSING_ARG_CHANNEL")
    assert_error(f"{base}/channel/create?topic=ch_t&channel=c!", "POST", 400, "INVALID_ARG_CHANNEL")
    assert_error(f"{base}/channel/delete?topic=ch_t", "POST", 400, "MISSING_ARG_CHANNEL")
    assert_error(f"{base}/channel/delete?topic=ch_t&channel=nope", "POST", 404, "CHANNEL_NOT_FOUND")
    assert_error(f"{base}/channel/create?topic=ch_t&channel=c%231", "POST", 400, "INVALID_ARG_CHANNEL")
    post_ok(f"{base}/channel/create?topic=ch_t&channel=c%23ephemeral")  # decoded: c#ephemeral
    post_ok(f"{base}/channel/create?topic=ch_t&channel=two")
    assert sorted(get_json(f"{base}/channels?topic=ch_t")["channels"]) == ["c#ephemeral", "two"]
    post_ok(f"{base}/channel/delete?topic=ch_t&channel=c%23ephemeral")
    assert get_json(f"{base}/channels?topic=ch_t") == {"channels": ["two"]}
    assert "ch_t" in get_json(f"{base}/topics")["topics"]


@pytest.mark.e2e
def test_tombstone_hides_the_producer_from_lookup_only(lookupd: LookupdProcess) -> None:
    base = lookupd.http
    conn = RawLookup(lookupd.tcp)
    conn.identify(http_port=7151)
    assert conn.call("REGISTER tomb_t") == b"OK"
    assert conn.call("REGISTER tomb_other") == b"OK"
    assert_error(f"{base}/topic/tombstone?node=127.0.0.1:7151", "POST", 400, "MISSING_ARG_TOPIC")
    assert_error(f"{base}/topic/tombstone?topic=tomb_t", "POST", 400, "MISSING_ARG_NODE")
    post_ok(f"{base}/topic/tombstone?topic=tomb_t&node=127.0.0.1:1")  # unknown node: still 200
    assert len(get_json(f"{base}/lookup?topic=tomb_t")["producers"]) == 1
    post_ok(f"{base}/topic/tombstone?topic=tomb_t&node=127.0.0.1:7151")
    assert get_json(f"{base}/lookup?topic=tomb_t")["producers"] == []
    assert len(get_json(f"{base}/lookup?topic=tomb_other")["producers"]) == 1
    node = next(
        n for n in get_json(f"{base}/nodes")["producers"] if n["remote_address"] == conn.local_address
    )
    assert dict(zip(node["topics"], node["tombstones"], strict=True)) == {"tomb_t": True, "tomb_other": False}
    (entry,) = get_json(f"{base}/debug")["topic:tomb_t:"]
    assert entry["tombstoned"] is True and entry["tombstoned_at"] > 0
    conn.close()


@pytest.mark.e2e
def test_cli_rejects_bad_flags(tmp_path: Path) -> None:
    for args in (["--tombstone-lifetime", "45 seconds"], ["--tcp-address", "nohost"]):
        proc = ServerProcess(tmp_path / "bad", *args, command="nsqlookupd")
        with pytest.raises(RuntimeError, match="Invalid value"):
            proc.start(timeout=20)
