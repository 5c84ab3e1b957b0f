"""Plain ACL against a real ``tidemq server --acl-file``: signed clients, refusals, reload, bad files."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ServerProcess, eventually, free_port, unique
from tidemq.client.config import ClientConfig
from tidemq.client.consumer.lite_pull import LitePullConsumer
from tidemq.client.instance import MQClientError
from tidemq.client.message import Message
from tidemq.client.producer import Producer
from tidemq.remoting.acl_signature import sign_request
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.transport import connect

pytestmark = pytest.mark.e2e

TOPIC = unique("AclTopic")
READONLY = unique("AclReadOnly")
ACL = f"""\
accounts:
  - accessKey: writer01
    secretKey: writer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - {TOPIC}=PUB|SUB
      - {READONLY}={{perm}}
"""


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    folder = tmp_path_factory.mktemp("acl")
    acl = folder / "plain_acl.yml"
    acl.write_text(ACL.format(perm="SUB"))
    proc = ServerProcess(folder / "data", "--acl-file", str(acl)).start()
    yield proc, acl
    proc.stop()


def config(server: ServerProcess, secret: str = "writer-secret") -> ClientConfig:
    return ClientConfig(namesrv_addr=server.namesrv, credentials=("writer01", secret))


def log_text(server: ServerProcess) -> str:
    return server.log_path.read_text(errors="replace")


async def raw(server: ServerProcess, request: RemotingCommand) -> RemotingCommand:
    host, port = server.broker.rsplit(":", 1)
    conn = await connect(host, int(port))
    try:
        return await conn.invoke(request, timeout=5.0)
    finally:
        conn.close()


async def test_signed_producer_and_consumer_work(acl_server: tuple[ServerProcess, Path]) -> None:
    server, _ = acl_server
    async with Producer(unique("PG"), config=config(server)) as producer:
        for i in range(3):
            await producer.send(Message(TOPIC, f"m{i}".encode()))
    consumer = LitePullConsumer(unique("CG"), config=config(server))
    consumer.subscribe(TOPIC, "*")
    await consumer.start()
    try:
        bodies: list[bytes] = []

        async def got_all() -> bool:
            bodies.extend(m.body for m in await consumer.poll(timeout=0.5))
            return len(bodies) >= 3

        await eventually(got_all, 20, "signed consumer receives")
        assert sorted(bodies) == [b"m0", b"m1", b"m2"]
    finally:
        await consumer.shutdown()


async def test_wrong_secret_and_unsigned_requests_are_refused(acl_server: tuple[ServerProcess, Path]) -> None:
    server, _ = acl_server
    forged = RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext_fields={"a": "PG", "b": TOPIC}, body=b"x")
    sign_request(forged, "writer01", "not-the-secret")
    resp = await raw(server, forged)
    assert (resp.code, resp.remark) == (
        ResponseCode.NO_PERMISSION,
        "Check signature failed for accessKey=writer01",
    )
    bare = RemotingCommand(RequestCode.GET_MAX_OFFSET, ext_fields={"topic": TOPIC, "queueId": "0"})
    resp = await raw(server, bare)
    assert (resp.code, resp.remark) == (ResponseCode.NO_PERMISSION, "No accessKey is configured")
    async with Producer(unique("PG"), config=config(server, "not-the-secret"), retry_times=0) as producer:
        with pytest.raises(MQClientError, match=r"NO_PERMISSION \(16\): Check signature failed"):
            await producer.send(Message(TOPIC, b"x"))
    assert "refused request code=310" in log_text(server)


async def test_account_without_pub_cannot_send(acl_server: tuple[ServerProcess, Path]) -> None:
    server, _ = acl_server
    async with Producer(unique("PG"), config=config(server), retry_times=0) as producer:
        with pytest.raises(MQClientError) as info:
            await producer.send(Message(READONLY, b"x"))
    assert f"NO_PERMISSION (16): No default permission for topic:{READONLY}, accessKey=writer01" in str(
        info.value
    )


async def test_editing_the_file_changes_what_is_allowed(acl_server: tuple[ServerProcess, Path]) -> None:
    server, acl = acl_server
    try:
        acl.write_text(ACL.format(perm="PUB"))
        async with Producer(unique("PG"), config=config(server), retry_times=0) as producer:

            async def sent() -> bool:
                try:
                    await producer.send(Message(READONLY, b"now allowed"))
                except MQClientError:
                    return False
                return True

            await eventually(sent, 10, "send allowed after reload", interval=0.3)
            # A file that does not parse keeps the rules in force and says which line is wrong.
            time.sleep(0.01)
            acl.write_text(ACL.format(perm="PUB") + "  - accessKey: &anchor\n")
            await eventually(lambda: "line 9: anchors" in log_text(server), 10, "reload error logged")
            await producer.send(Message(READONLY, b"still allowed"))
    finally:
        acl.write_text(ACL.format(perm="SUB"))
        await asyncio.sleep(1.2)


def test_bad_file_at_start_exits_2_with_the_line(tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text("accounts:\n  - accessKey: abcdefg\n    secretKey: abcdefg\n    defaultTopicPerm: ALL\n")
    args = [sys.executable, "-m", "tidemq", "server", "--data-dir", str(tmp_path / "data")]
    args += ["--namesrv-port", str(free_port()), "--broker-port", str(free_port()), "--acl-file", str(acl)]
    args += ["--nsqd-tcp-port", str(free_port()), "--nsqd-http-port", str(free_port())]
    args += ["--lookupd-tcp-port", str(free_port()), "--lookupd-http-port", str(free_port())]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "line 4: defaultTopicPerm: unknown permission 'ALL'" in done.stderr
