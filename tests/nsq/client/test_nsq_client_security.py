"""The NSQ client's upgrades against a real ``tidemq nsqd``: deflate, snappy, TLS (also combined), AUTH."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from typing import Any

import pytest
import trustme

from tests.nsq_support import AuthServer, tls_files
from tests.support import ServerProcess, eventually, run
from tidemq.nsq.client import AuthError, Consumer, Message, NotConnectedError, Producer, ProtocolError

pytestmark = pytest.mark.e2e

EVERYTHING = [{"topic": ".*", "channels": [".*"], "permissions": ["subscribe", "publish"]}]
SECRETS: dict[str, Any] = {
    "root": {"ttl": 3600, "identity": "root", "identity_url": "http://id/root", "authorizations": EVERYTHING},
    "reader": {
        "ttl": 3600,
        "identity": "reader",
        "authorizations": [{"topic": "^open$", "channels": [".*"], "permissions": ["subscribe"]}],
    },
}


@pytest.fixture(scope="module")
def nsqd(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("clienttls")
    cert_path, key_path = tls_files(ca, folder)
    proc = ServerProcess(folder / "d", "--tls-cert", cert_path, "--tls-key", key_path, command="nsqd").start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def auth_nsqd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    auth = AuthServer(SECRETS)
    proc = ServerProcess(
        tmp_path_factory.mktemp("clientauth") / "d", "--auth-http-address", auth.address, command="nsqd"
    ).start()
    yield proc
    proc.stop()
    auth.close()


async def round_trip(addr: str, topic: str, **options: Any) -> list[dict[str, Any]]:
    """Publish small, compressible and large bodies and consume them, both sides with ``options``.

    Returns what nsqd answered to each side's IDENTIFY.
    """
    bodies = [b"small", b"abc" * 20_000, bytes(range(256)) * 1200] + [b"n%d" % i for i in range(200)]
    got: list[bytes] = []

    async def handler(message: Message) -> None:
        got.append(message.body)

    consumer = Consumer(topic, "ch", max_in_flight=50, **options)
    consumer.add_handler(handler)
    await consumer.connect_to_nsqd(addr)
    producer = Producer(addr, **options)
    await producer.publish(topic, bodies[0])
    await producer.multi_publish(topic, bodies[1:3])
    await asyncio.gather(*(producer.publish(topic, body) for body in bodies[3:]))
    await eventually(lambda: len(got) >= len(bodies), what="all bodies back")
    assert sorted(got) == sorted(bodies)
    answers = [
        conn.identify.raw for conn in [*consumer.connections(), producer._conn] if conn and conn.identify
    ]
    await producer.stop()
    await consumer.stop()
    return answers


@pytest.mark.parametrize(
    "options",
    [
        {"deflate": True, "deflate_level": 3},
        {"snappy": True},
        {"tls_v1": True},
        {"tls_v1": True, "deflate": True},
        {"tls_v1": True, "snappy": True},
    ],
    ids=["deflate", "snappy", "tls", "tls+deflate", "tls+snappy"],
)
def test_upgraded_sessions_end_to_end(
    nsqd: ServerProcess, client_tls: ssl.SSLContext, options: dict[str, Any]
) -> None:
    run(_upgraded_round_trip(nsqd, client_tls, options, "up_"))


@pytest.mark.parametrize(
    "options", [{"tls_v1": True}, {"tls_v1": True, "snappy": True}], ids=["tls", "tls+snappy"]
)
def test_tls_sessions_on_uvloop(
    nsqd: ServerProcess, client_tls: ssl.SSLContext, options: dict[str, Any]
) -> None:
    """The TLS upgrade swaps the transport under a connection mid-stream: on uvloop's too."""
    uvloop = pytest.importorskip("uvloop")
    uvloop.run(_upgraded_round_trip(nsqd, client_tls, options, "uv_"))


async def _upgraded_round_trip(
    nsqd: ServerProcess, client_tls: ssl.SSLContext, options: dict[str, Any], prefix: str
) -> None:
    extra = {"tls_config": client_tls} if options.get("tls_v1") else {}
    answers = await round_trip(nsqd.nsqd, prefix + "_".join(sorted(options)), **options, **extra)
    assert len(answers) == 2
    for answer in answers:
        for key in ("tls_v1", "deflate", "snappy"):
            assert answer[key] is bool(options.get(key)), (key, answer)


async def test_tls_with_an_untrusted_certificate_fails_cleanly(nsqd: ServerProcess) -> None:
    producer = Producer(nsqd.nsqd, tls_v1=True)  # default trust store: the test CA is unknown
    with pytest.raises(NotConnectedError, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        await producer.publish("t", b"x")
    insecure = Producer(nsqd.nsqd, tls_v1=True, tls_insecure_skip_verify=True)
    await insecure.publish("t", b"x")
    await insecure.stop()


async def test_auth(auth_nsqd: ServerProcess) -> None:
    anonymous = Producer(auth_nsqd.nsqd)
    with pytest.raises(AuthError, match="auth_secret"):
        await anonymous.publish("open", b"x")
    wrong = Producer(auth_nsqd.nsqd, auth_secret="wrong")
    with pytest.raises(ProtocolError) as info:
        await wrong.publish("open", b"x")
    assert info.value.code == "E_AUTH_FAILED"
    root = Producer(auth_nsqd.nsqd, auth_secret="root")
    await root.publish("open", b"hello")
    assert root._conn is not None and root._conn.auth is not None
    assert (root._conn.auth.identity, root._conn.auth.identity_url) == ("root", "http://id/root")
    reader_pub = Producer(auth_nsqd.nsqd, auth_secret="reader")
    with pytest.raises(ProtocolError) as info:
        await reader_pub.publish("open", b"x")
    assert info.value.code == "E_UNAUTHORIZED"

    got: list[bytes] = []

    async def handler(message: Message) -> None:
        got.append(message.body)

    reader = Consumer("open", "ch", auth_secret="reader")
    reader.add_handler(handler)
    await reader.connect_to_nsqd(auth_nsqd.nsqd)
    await eventually(lambda: got == [b"hello"], what="authorized delivery")
    await reader.stop()
    await root.stop()
