"""Transaction messages over gRPC with the official Python SDK (tests/grpc/sdk_transaction.py, a subprocess):
commit, rollback, an undecided one resolved by the back-check through Telemetry, the check after a SIGKILL,
and EndTransaction's refusals; committed messages are read back by tidemq's remoting consumer."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.consumer_support import drain
from tests.support import ServerProcess, create_topic, unique
from tidemq.grpc.proto import definition_pb2 as pb
from tidemq.grpc.proto import service_pb2 as spb
from tidemq.grpc.proto import service_pb2_grpc as spb_grpc

pytestmark = pytest.mark.e2e

SDK_TRANSACTION = Path(__file__).with_name("sdk_transaction.py")
CLIENT = (("x-mq-client-id", "tx-test@1"),)


def sdk(
    server: ServerProcess, topic: str, mode: str, *args: str, env: dict[str, str] | None = None
) -> list[Any]:
    proc = subprocess.run(
        [sys.executable, str(SDK_TRANSACTION), server.grpc, topic, mode, *args],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def tx_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("grpc-tx")
    proc = ServerProcess(
        folder / "data", "--transaction-timeout", "1", "--transaction-check-interval", "1"
    ).start()
    yield proc
    proc.stop()


async def test_commit_and_rollback(tx_server: ServerProcess) -> None:
    topic = unique("grpctx")
    await create_topic(tx_server.broker, topic, 2, routed_by=tx_server.namesrv)
    committed = sdk(tx_server, topic, "commit", "yes")
    assert committed[0]["ok"] and committed[0]["transaction_id"] and committed[1] == {"decided": "commit"}
    rolled = sdk(tx_server, topic, "rollback", "no")
    assert rolled[0]["ok"] and rolled[1] == {"decided": "rollback"}, rolled

    got = await drain(tx_server.namesrv, topic, expect=1, timeout=15)
    assert [m.body for m in got] == [b"yes"]
    (msg,) = got
    assert msg.properties["UNIQ_KEY"] == committed[0]["message_id"]
    assert msg.tags == "TxTag" and msg.properties["order"] == "42"
    assert msg.properties["PGROUP"] == topic  # the proxy's producer group: the topic


async def test_undecided_half_message_is_resolved_by_the_back_check(tx_server: ServerProcess) -> None:
    topic = unique("grpctx")
    await create_topic(tx_server.broker, topic, 2, routed_by=tx_server.namesrv)
    lines = sdk(tx_server, topic, "check-commit", "checked", "30")
    sent, check = lines[0], lines[1]
    assert sent["ok"], lines
    assert check["checked"] == sent["message_id"] and check["body"] == "checked" and check["topic"] == topic
    assert check["tag"] == "TxTag" and check["props"] == {"order": "42"}
    got = await drain(tx_server.namesrv, topic, expect=1, timeout=15)
    assert [m.body for m in got] == [b"checked"]

    rolled = sdk(tx_server, topic, "check-rollback", "dropped", "30")
    assert rolled[1]["checked"] == rolled[0]["message_id"]
    assert [m.body for m in await drain(tx_server.namesrv, topic, expect=2, timeout=3)] == [b"checked"]


async def test_half_message_is_checked_after_a_sigkill(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path / "data", "--transaction-timeout", "1", "--transaction-check-interval", "1"
    ).start()
    try:
        topic = unique("grpctx")
        await create_topic(server.broker, topic, 2, routed_by=server.namesrv)
        (sent,) = sdk(server, topic, "orphan", "survivor")
        assert sent["ok"], sent
        server.kill()
        server.start()
        lines = sdk(server, topic, "check-commit", "-", "30")
        assert lines and lines[0]["checked"] == sent["message_id"], lines
        got = await drain(server.namesrv, topic, expect=1, timeout=15)
        assert [m.body for m in got] == [b"survivor"]
    finally:
        server.stop()


@pytest.fixture(scope="module")
def remembering_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The default check interval (60 s): a decided transaction is remembered until a check pass moves
    the scan past it, which ``tx_server``'s one-second passes do while a slow SDK process exits."""
    proc = ServerProcess(tmp_path_factory.mktemp("grpc-tx-remembering") / "data").start()
    yield proc
    proc.stop()


async def test_end_transaction_refusals(remembering_server: ServerProcess) -> None:
    server = remembering_server
    topic = unique("grpctx")
    await create_topic(server.broker, topic, 2, routed_by=server.namesrv)
    sent = sdk(server, topic, "commit", "once")
    async with grpc.aio.insecure_channel(server.grpc) as channel:
        stub = spb_grpc.MessagingServiceStub(channel)

        async def end(message_id: str, transaction_id: str = "t") -> pb.Status:
            request = spb.EndTransactionRequest(
                topic=pb.Resource(name=topic),
                message_id=message_id,
                transaction_id=transaction_id,
                resolution=pb.COMMIT,
                source=pb.SOURCE_CLIENT,
            )
            response = await stub.EndTransaction(request, metadata=CLIENT)
            return response.status

        decided = await end(sent[0]["message_id"])
        assert decided.code == pb.INVALID_TRANSACTION_ID and "already committed" in decided.message
        unknown = await end("no-such-message")
        assert unknown.code == pb.INVALID_TRANSACTION_ID and "no-such-message" in unknown.message
        assert (await end("x", transaction_id="")).code == pb.INVALID_TRANSACTION_ID
