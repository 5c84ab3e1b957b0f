"""nsqd's AUTH against the plain ACL file of a real ``tidemq server --acl-file``: tidemq's NSQ client,
pynsq and raw commands within and beyond an account's permissions, reloads, and the HTTP API's guard."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import orjson
import pytest

from tests.nsq_support import RawNsq
from tests.support import ServerProcess, eventually, run_script, unique
from tidemq.nsq.client import Consumer, Message, Producer
from tidemq.nsq.client.errors import AuthError

pytestmark = pytest.mark.e2e

TOPIC = unique("nsqacl")
READONLY = unique("nsqread")
PYTOPIC = unique("nsqpy")  # no channel yet: pynsq's channel gets what was published before it
WRITER = "nsqwriter:writer-secret"
ACCOUNTS = f"""\
{{white}}accounts:
  - accessKey: nsqwriter
    secretKey: writer-secret
    defaultTopicPerm: DENY
    topicPerms:
      - {TOPIC}=PUB|SUB
      - {READONLY}=SUB
      - {PYTOPIC}=PUB|SUB
  - accessKey: nsqadmin
    secretKey: admin-secret
    admin: true
{{extra}}"""
EXTRA = "  - accessKey: nsqtemp\n    secretKey: temp-secret\n    defaultTopicPerm: PUB|SUB\n"
PYNSQ = Path(__file__).parents[2] / "interop" / "pynsq_client.py"


def write(acl: Path, white: str = "", extra: str = EXTRA) -> None:
    acl.write_text(ACCOUNTS.format(white=white, extra=extra))
    stat = acl.stat()
    bump = max(stat.st_mtime_ns, time.time_ns()) + 1_000_000_000  # a new mtime even within one tick
    os.utime(acl, ns=(bump, bump))


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    folder = tmp_path_factory.mktemp("nsqacl")
    acl = folder / "plain_acl.yml"
    write(acl)
    proc = ServerProcess(folder / "data", "--acl-file", str(acl)).start()
    yield proc, acl
    proc.stop()


async def authed(server: ServerProcess, secret: str) -> tuple[RawNsq, dict[str, object]]:
    client = await RawNsq.open(server.nsqd)
    assert (await client.identify())["auth_required"] is True
    client.send("AUTH", body=secret.encode())
    return client, orjson.loads(await client.response())


async def test_tidemq_client_auths_and_publishes_and_subscribes(
    acl_server: tuple[ServerProcess, Path],
) -> None:
    server, _ = acl_server
    producer = Producer(server.nsqd, auth_secret=WRITER)
    await producer.publish(TOPIC, b"hello")
    assert producer._conn is not None and producer._conn.auth is not None
    assert producer._conn.auth.identity == "nsqwriter"
    got: list[bytes] = []

    async def handler(message: Message) -> None:
        got.append(message.body)

    consumer = Consumer(TOPIC, "ch", auth_secret=WRITER)
    consumer.add_handler(handler)
    await consumer.connect_to_nsqd(server.nsqd)
    try:
        await eventually(lambda: got == [b"hello"], what="authorized delivery")
    finally:
        await consumer.stop()
        await producer.stop()


async def test_no_auth_wrong_secret_and_missing_permission_are_refused(
    acl_server: tuple[ServerProcess, Path],
) -> None:
    server, _ = acl_server
    anonymous = Producer(server.nsqd)
    with pytest.raises(AuthError, match="auth_secret"):
        await anonymous.publish(TOPIC, b"x")
    early = await RawNsq.open(server.nsqd)
    assert (await early.identify())["auth_required"] is True
    early.send("PUB", TOPIC, body=b"x")
    assert (await early.error()).startswith(b"E_AUTH_FIRST AUTH required before PUB")
    assert await early.closed()

    for secret in ("nsqwriter:wrong-secret", "nsqwriter", "nobody:writer-secret", "writer-secret"):
        wrong = await RawNsq.open(server.nsqd)
        await wrong.identify()
        wrong.send("AUTH", body=secret.encode())
        assert await wrong.error() == b"E_AUTH_FAILED AUTH failed", secret
        assert await wrong.closed()

    reader, reply = await authed(server, WRITER)
    assert reply == {
        "identity": "nsqwriter",
        "identity_url": "",
        "permission_count": 2,
    }  # publish and subscribe
    reader.send("PUB", READONLY, body=b"x")
    assert await reader.error() == f'E_UNAUTHORIZED AUTH failed for PUB on "{READONLY}" ""'.encode()
    assert await reader.closed()
    other, _ = await authed(server, WRITER)
    other.send("PUB", unique("unlisted"), body=b"x")  # defaultTopicPerm: DENY
    assert (await other.error()).startswith(b"E_UNAUTHORIZED")
    subscriber, _ = await authed(server, WRITER)
    await subscriber.sub(READONLY, "any-channel")  # SUB: every channel of the topic
    subscriber.close()
    admin, reply = await authed(server, "nsqadmin:admin-secret")
    assert reply["identity"] == "nsqadmin"
    assert await admin.pub(unique("anything"), b"x") == b"OK"
    admin.close()


def test_pynsq_auths_within_its_permissions(acl_server: tuple[ServerProcess, Path]) -> None:
    server, _ = acl_server
    topic_args = {"nsqd_tcp_address": server.nsqd, "auth_secret": WRITER}
    pub = run_script(
        [sys.executable, str(PYNSQ), "publish"], 30, topic=PYTOPIC, body="from-pynsq", **topic_args
    )
    assert pub.rc == 0, pub.describe()
    sub = run_script(
        [sys.executable, str(PYNSQ), "consume"], 30, topic=PYTOPIC, channel="pynsq", count=1, **topic_args
    )
    assert sub.rc == 0, sub.describe()
    assert [r["body"] for r in sub.records] == ["from-pynsq"]
    refused = run_script([sys.executable, str(PYNSQ), "publish"], 10, topic=READONLY, body="x", **topic_args)
    assert refused.rc != 0 and "E_UNAUTHORIZED" in refused.stderr, refused.describe()


async def test_a_removed_account_cannot_auth_after_the_reload(acl_server: tuple[ServerProcess, Path]) -> None:
    server, acl = acl_server
    before, reply = await authed(server, "nsqtemp:temp-secret")
    assert reply["identity"] == "nsqtemp"
    try:
        write(acl, extra="")

        async def refused() -> bool:
            client = await RawNsq.open(server.nsqd)
            await client.identify()
            client.send("AUTH", body=b"nsqtemp:temp-secret")
            _, data = await client.frame()
            client.close()
            return data.startswith(b"E_AUTH_FAILED")

        await eventually(refused, 10, "AUTH refused after the account was removed", interval=0.3)
        await asyncio.sleep(1.1)  # the authorizations of a connection that already sent AUTH last a second
        before.send("PUB", TOPIC, body=b"x")
        assert await before.error() == b"E_AUTH_FAILED AUTH failed"
    finally:
        write(acl)
        await asyncio.sleep(1.0)


async def test_http_writes_only_from_global_white_addresses(acl_server: tuple[ServerProcess, Path]) -> None:
    server, acl = acl_server
    base = f"http://{server.nsqd_http}"
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base}/pub", params={"topic": TOPIC}, data=b"x") as resp:
            assert (resp.status, await resp.json()) == (403, {"message": "FORBIDDEN"})
        async with http.post(f"{base}/topic/create", params={"topic": unique("t")}) as resp:
            assert resp.status == 403
        async with http.get(f"{base}/ping") as resp:
            assert resp.status == 200  # reads stay open
        try:
            write(acl, white="globalWhiteRemoteAddresses:\n  - 127.0.0.1\n")

            async def allowed() -> bool:
                async with http.post(f"{base}/pub", params={"topic": TOPIC}, data=b"white") as resp:
                    return resp.status == 200

            await eventually(allowed, 10, "HTTP publish from a global white address", interval=0.3)
            # A global white address needs no AUTH over TCP either (Java passes its requests unsigned).
            client = await RawNsq.open(server.nsqd)
            assert (await client.identify())["auth_required"] is False
            assert await client.pub(unique("white"), b"x") == b"OK"
            client.close()
        finally:
            write(acl)
            await asyncio.sleep(1.0)
