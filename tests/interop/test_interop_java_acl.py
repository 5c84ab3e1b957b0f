"""Plain ACL across Apache RocketMQ's own Java client (4.9.8) and ``tidemq server --acl-file``: the
producer, push consumer and DefaultMQAdminExt signing with AclClientRPCHook(SessionCredentials), and what
the Java client reports when tidemq refuses a request (a wrong secret key, a topic without PUB, an
admin-only request from an account that is not admin)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.java_client_support import JavaPeer, events
from tests.support import RawClient, ServerProcess, eventually, unique
from tidemq.remoting.codes import ResponseCode

pytestmark = [pytest.mark.e2e, pytest.mark.java_client]

TOPIC = unique("JavaAcl")
READONLY = unique("JavaAclReadOnly")
ADMIN = ("javaAdmin", "admin-secret-1")
WRITER = ("javaWriter", "writer-secret-1")
ACL = f"""\
accounts:
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
  - accessKey: {WRITER[0]}
    secretKey: {WRITER[1]}
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - {TOPIC}=PUB|SUB
      - {READONLY}=SUB
"""


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("java-acl")
    acl = folder / "plain_acl.yml"
    acl.write_text(ACL)
    proc = ServerProcess(folder / "data", "--acl-file", str(acl)).start()
    yield proc
    proc.stop()


def java(server: ServerProcess, home: Path, credentials: tuple[str, str]) -> JavaPeer:
    return JavaPeer(server.namesrv, home, credentials)


async def routed(namesrv: str, topic: str) -> None:
    """The name server (which the ACL does not guard, as in Java) routes ``topic``."""
    n = await RawClient.open(namesrv)

    async def has_route() -> dict[str, Any] | None:
        route = await n.route(topic)
        return route if route and route.get("queueDatas") else None

    try:
        await eventually(has_route, what=f"a route for {topic}", interval=0.1)
    finally:
        n.close()


def admin_calls(peer: JavaPeer, *calls: str) -> list[dict[str, Any]]:
    args: list[str] = []
    for call in calls:
        args += ["--call", call]
    return events(peer.run("admin", *args), "admin")


@pytest.fixture(scope="module")
def topics(acl_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Both topics, created by the Java admin signed as the admin account (unsigned, it is refused)."""
    home = tmp_path_factory.mktemp("java-admin")
    answers = admin_calls(
        java(acl_server, home, ADMIN), f"updateTopic:{TOPIC}:4", f"updateTopic:{READONLY}:2"
    )
    for topic in (TOPIC, READONLY):
        asyncio.run(routed(acl_server.namesrv, topic))
    return answers


def test_java_admin_signed_as_admin_creates_topics(
    acl_server: ServerProcess, topics: list[dict[str, Any]]
) -> None:
    assert [a["ok"] for a in topics] == [True, True], topics
    assert topics[0]["result"] == [acl_server.broker], topics


def test_admin_request_from_a_non_admin_account_is_refused(
    acl_server: ServerProcess, topics: list[dict[str, Any]], tmp_path: Path
) -> None:
    [answer] = admin_calls(java(acl_server, tmp_path, WRITER), f"updateTopic:{unique('JavaAclNope')}:4")
    assert answer["ok"] is False and answer["code"] == ResponseCode.NO_PERMISSION, answer
    assert answer["remark"] == "Need admin permission for request code=17, but accessKey=javaWriter is not"


def test_signed_java_producer_and_push_consumer(
    acl_server: ServerProcess, topics: list[dict[str, Any]], tmp_path: Path
) -> None:
    """acl-1's first delivery fails: its send-back (PUB on the topic, SUB on the group) is signed too."""
    peer = java(acl_server, tmp_path, WRITER)
    sent = events(peer.run("produce", "--topic", TOPIC, "--count", "4", "--body-prefix", "acl-"), "sent")
    assert [s["status"] for s in sent] == ["SEND_OK"] * 4, sent
    result = peer.run(
        "consume",
        *("--topic", TOPIC, "--group", unique("JavaAclCG"), "--expect", "4", "--timeout", "45"),
        *("--fail-first", "1", "--fail-match", "acl-1", "--retry-delay-level", "1"),
    )
    received = events(result, "received")
    assert {r["body"] for r in received} == {"acl-0", "acl-1", "acl-2", "acl-3"}, result.describe()
    retried = [r for r in received if r["body"] == "acl-1"]
    assert [(r["failed"], r["reconsumeTimes"]) for r in retried] == [(True, 0), (False, 1)], retried


def test_wrong_secret_key_is_refused(
    acl_server: ServerProcess, topics: list[dict[str, Any]], tmp_path: Path
) -> None:
    peer = java(acl_server, tmp_path, (WRITER[0], "not-the-secret"))
    result = peer.run("produce", "--topic", TOPIC, "--retries", "0", check=False)
    assert result.rc == 1, result.describe()
    [failure] = events(result, "send-failed")
    assert failure["code"] == ResponseCode.NO_PERMISSION, failure
    assert failure["remark"] == "Check signature failed for accessKey=javaWriter", failure
    assert "refused request code=310" in acl_server.log_path.read_text(errors="replace")


def test_topic_without_pub_is_refused(
    acl_server: ServerProcess, topics: list[dict[str, Any]], tmp_path: Path
) -> None:
    result = java(acl_server, tmp_path, WRITER).run(
        "produce", "--topic", READONLY, "--retries", "0", check=False
    )
    assert result.rc == 1, result.describe()
    [failure] = events(result, "send-failed")
    assert failure["code"] == ResponseCode.NO_PERMISSION, failure
    assert failure["remark"] == f"No default permission for topic:{READONLY}, accessKey=javaWriter", failure
