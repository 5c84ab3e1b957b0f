"""TLS, snappy and deflate sessions, and AUTH through an auth HTTP server, against a real ``tidemq nsqd``."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import trustme

from tests.nsq_support import AuthServer, RawNsq
from tests.nsq_support import tls_files as issue_tls_files
from tests.support import ServerProcess

pytestmark = pytest.mark.e2e

EVERYTHING = {"topic": ".*", "channels": [".*"], "permissions": ["subscribe", "publish"]}
SECRETS: dict[str, Any] = {
    "publisher": {
        "ttl": 3600,
        "identity": "pub-bot",
        "authorizations": [{"topic": "^allowed$", "channels": [".*"], "permissions": ["publish"]}],
    },
    "subscriber": {
        "ttl": 3600,
        "identity": "sub-bot",
        "identity_url": "http://id/sub",
        "authorizations": [{"topic": "^allowed$", "channels": ["^ch$"], "permissions": ["subscribe"]}],
    },
    "everything": {"ttl": 3600, "identity": "root", "authorizations": [EVERYTHING]},
    "short-lived": {"ttl": 1, "identity": "brief", "authorizations": [EVERYTHING]},
    "nothing": {"ttl": 3600, "identity": "nobody", "authorizations": []},
    "zero-ttl": {"ttl": 0, "authorizations": [EVERYTHING]},
}


@pytest.fixture(scope="module")
def tls_files(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    return issue_tls_files(ca, tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def auth() -> Iterator[AuthServer]:
    server = AuthServer(SECRETS)
    yield server
    server.close()


@pytest.fixture(scope="module")
def nsqd(
    tmp_path_factory: pytest.TempPathFactory, tls_files: tuple[str, str], auth: AuthServer
) -> Iterator[ServerProcess]:
    cert, key = tls_files
    proc = ServerProcess(
        tmp_path_factory.mktemp("secure") / "data",
        "--tls-cert",
        cert,
        "--tls-key",
        key,
        "--auth-http-address",
        auth.address,
        command="nsqd",
    ).start()
    yield proc
    proc.stop()


async def authed(
    nsqd: ServerProcess, secret: str, tls: ssl.SSLContext | None = None, **fields: object
) -> RawNsq:
    client = await RawNsq.open(nsqd.nsqd)
    answer = await client.identify_upgrade(tls, **fields)
    assert answer["auth_required"] is True
    client.send("AUTH", body=secret.encode())
    reply = orjson.loads(await client.response())
    assert reply["identity"] == SECRETS[secret]["identity"]
    return client


async def test_auth_allows_and_denies_per_topic_channel_and_permission(
    nsqd: ServerProcess, auth: AuthServer
) -> None:
    early = await RawNsq.open(nsqd.nsqd)
    assert (await early.identify())["auth_required"] is True
    early.send("PUB", "allowed", body=b"x")
    assert (await early.error()).startswith(b"E_AUTH_FIRST AUTH required before PUB")
    assert await early.closed()

    pub = await authed(nsqd, "publisher")
    assert await pub.pub("allowed", b"granted") == b"OK"
    assert auth.queries[-1] == {
        "remote_ip": "127.0.0.1",
        "tls": "false",
        "secret": "publisher",
        "common_name": "",
    }
    pub.send("PUB", "elsewhere", body=b"x")
    assert await pub.error() == b'E_UNAUTHORIZED AUTH failed for PUB on "elsewhere" ""'
    assert await pub.closed()

    again = await authed(nsqd, "publisher")
    again.send("AUTH", body=b"publisher")
    assert await again.error() == b"E_INVALID AUTH already set"
    no_sub = await authed(nsqd, "publisher")
    no_sub.send("SUB", "allowed", "ch")
    assert (await no_sub.error()).startswith(b"E_UNAUTHORIZED")

    sub = await authed(nsqd, "subscriber")
    sub.send("SUB", "allowed", "other")
    assert await sub.error() == b'E_UNAUTHORIZED AUTH failed for SUB on "allowed" "other"'
    sub = await authed(nsqd, "subscriber")
    await sub.sub("allowed", "ch", rdy=1)
    assert (await sub.message()).body == b"granted"
    sub.send("PUB", "allowed", body=b"x")
    assert await sub.error() == b'E_UNAUTHORIZED AUTH failed for PUB on "allowed" ""', "no publish right"
    for c in (early, pub, again, no_sub, sub):
        c.close()


@pytest.mark.parametrize(
    ("secret", "expected"),
    [
        ("nothing", b"E_UNAUTHORIZED AUTH no authorizations found"),
        ("zero-ttl", b"E_AUTH_FAILED AUTH failed"),
        ("unknown-secret", b"E_AUTH_FAILED AUTH failed"),
    ],
)
async def test_auth_failures_are_fatal_and_reveal_nothing(
    nsqd: ServerProcess, secret: str, expected: bytes
) -> None:
    client = await RawNsq.open(nsqd.nsqd)
    await client.identify()
    client.send("AUTH", body=secret.encode())
    assert await client.error() == expected
    assert await client.closed()
    client.close()


async def test_auth_is_asked_again_after_its_ttl(nsqd: ServerProcess, auth: AuthServer) -> None:
    client = await authed(nsqd, "short-lived")
    before = sum(q["secret"] == "short-lived" for q in auth.queries)
    assert await client.pub("anything", b"1") == b"OK"
    await asyncio.sleep(1.2)
    assert await client.pub("anything", b"2") == b"OK"
    assert sum(q["secret"] == "short-lived" for q in auth.queries) == before + 1
    client.close()


async def test_auth_disabled_server_refuses_auth(server: ServerProcess) -> None:
    client = await RawNsq.open(server.nsqd)
    assert (await client.identify())["auth_required"] is False
    client.send("AUTH", body=b"secret")
    assert await client.error() == b"E_AUTH_DISABLED AUTH disabled"
    client.close()


@pytest.mark.parametrize(
    "upgrade",
    [
        {"tls": True},
        {"snappy": True},
        {"deflate": True, "deflate_level": 3},
        {"tls": True, "snappy": True},
        {"tls": True, "deflate": True},
    ],
    ids=["tls", "snappy", "deflate", "tls+snappy", "tls+deflate"],
)
async def test_upgraded_sessions_carry_small_and_large_messages(
    nsqd: ServerProcess, client_tls: ssl.SSLContext, upgrade: dict[str, Any], auth: AuthServer
) -> None:
    fields = dict(upgrade)
    tls = client_tls if fields.pop("tls", False) else None
    topic = "up_" + "_".join(sorted(upgrade))
    bodies = [f"m{i}".encode() * (i + 1) for i in range(50)] + [bytes(range(256)) * 600]  # one of 150 KiB

    pub = await authed(nsqd, "everything", tls, **fields)
    sub = await authed(nsqd, "everything", tls, **fields)
    assert auth.queries[-1]["tls"] == ("true" if tls else "false")
    await sub.sub(topic, "c", rdy=100)
    assert await pub.mpub(topic, bodies[:25]) == b"OK"
    for body in bodies[25:]:
        assert await pub.pub(topic, body) == b"OK"
    got = []
    for _ in bodies:
        msg = await sub.message()
        sub.send("FIN", msg.id)
        got.append(msg.body)
    assert got == bodies
    stats = orjson.loads(
        await asyncio.to_thread(_get, f"http://{nsqd.nsqd_http}/stats?format=json&topic={topic}")
    )
    client = stats["topics"][0]["channels"][0]["clients"][0]
    assert client["tls"] is (tls is not None)
    assert client["snappy"] is bool(fields.get("snappy")) and client["deflate"] is bool(fields.get("deflate"))
    if tls is not None:
        assert client["tls_version"].startswith("TLS")
    pub.close()
    sub.close()


def _get(url: str) -> bytes:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read()  # type: ignore[no-any-return]


async def test_snappy_and_deflate_together_are_refused(nsqd: ServerProcess) -> None:
    client = await RawNsq.open(nsqd.nsqd)
    client.send("IDENTIFY", body=orjson.dumps({"feature_negotiation": True, "snappy": True, "deflate": True}))
    assert await client.error() == b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression"
    assert await client.closed()
    client.close()


async def test_corrupt_compressed_stream_closes_only_that_connection(nsqd: ServerProcess) -> None:
    bystander = await authed(nsqd, "everything", snappy=True)
    broken = await RawNsq.open(nsqd.nsqd)
    await broken.identify_upgrade(snappy=True)
    broken.compression = None
    broken.send_raw(b"\x00\x08\x00\x00" + b"\xde\xad\xbe\xef" + b"\x01\x02\x03\x04")  # bad CRC
    assert await broken.closed()
    assert await bystander.pub("after", b"still fine") == b"OK"
    bystander.close()
    broken.close()


async def test_tls_required_refuses_plain_commands(
    tmp_path: Path, tls_files: tuple[str, str], client_tls: ssl.SSLContext
) -> None:
    cert, key = tls_files
    proc = ServerProcess(
        tmp_path / "d", "--tls-cert", cert, "--tls-key", key, "--tls-required", "true", command="nsqd"
    ).start()

    try:
        plain = await RawNsq.open(proc.nsqd)
        await plain.identify()
        plain.send("PUB", "t", body=b"x")
        assert await plain.error() == b"E_INVALID cannot PUB in current state (TLS required)"
        assert await plain.closed()
        secure = await RawNsq.open(proc.nsqd)
        assert (await secure.identify_upgrade(client_tls))["tls_v1"] is True
        assert await secure.pub("t", b"x") == b"OK"
        plain.close()
        secure.close()
    finally:
        proc.stop()


def test_bad_tls_settings_are_a_clear_startup_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing.pem"
    proc = ServerProcess(
        tmp_path / "d", "--tls-cert", str(missing), "--tls-key", str(missing), command="nsqd"
    )
    import subprocess

    result = subprocess.run(proc.args(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "missing.pem" in result.stderr or "No such file" in result.stderr
