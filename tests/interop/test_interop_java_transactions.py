"""Apache RocketMQ's Java client 4.9.8 TransactionMQProducer against ``tidemq server``: its
TransactionListener decides each local transaction (COMMIT_MESSAGE, ROLLBACK_MESSAGE, UNKNOW), the broker's
CHECK_TRANSACTION_STATE reaches it, and tidemq's push consumer sees exactly the committed messages, once.

The peer's ``transact`` sub-command (interop/rocketmq-java/client-4.9.8, Transact.java) prints what the
listener executed and was asked; the server checks a half message 1 s after its birth, every 0.3 s, at
most 3 times."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.consumer_support import Collector, consumer, max_offsets
from tests.java_client_support import JavaPeer, events
from tests.support import ServerProcess, create_topic, eventually, run, unique
from tidemq.client.consumer import ConsumeFromWhere

pytestmark = [pytest.mark.e2e, pytest.mark.java_client]

CHECK_MAX = 3
TX_OPTIONS = (
    "--transaction-timeout",
    "1",
    "--transaction-check-interval",
    "0.3",
    "--transaction-check-max",
    str(CHECK_MAX),
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path_factory.mktemp("java-tx") / "data", *TX_OPTIONS).start()
    yield srv
    srv.stop()


@pytest.fixture
def java(server: ServerProcess, tmp_path: Path) -> JavaPeer:
    return JavaPeer(server.namesrv, tmp_path / "java-home")


def new_topic(server: ServerProcess, prefix: str) -> str:
    topic = unique(prefix)
    run(create_topic(server.broker, topic, routed_by=server.namesrv))
    return topic


async def consumed(server: ServerProcess, topic: str, expect: set[bytes], settle: float = 2.0) -> list[bytes]:
    """Every body a fresh tidemq push consumer group gets from ``topic``: waits for ``expect``, then
    ``settle`` seconds more so that a late or duplicate delivery is seen too."""
    got = Collector()
    c = consumer(
        server.namesrv, unique("CG-tx"), topic, got, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    )
    await c.start()
    try:
        await eventually(lambda: got.distinct() >= expect, timeout=30, what=f"{sorted(expect)} consumed")
        await asyncio.sleep(settle)
    finally:
        await c.shutdown()
    return sorted(got.bodies)


def test_java_listener_commit_rollback_and_unknown_then_checked_commit(
    server: ServerProcess, java: JavaPeer
) -> None:
    topic = new_topic(server, "java-tx")
    group = unique("JTX")
    result = java.run(
        "transact",
        topic=topic,
        group=group,
        local="COMMIT_MESSAGE,ROLLBACK_MESSAGE,UNKNOW",
        answers="COMMIT_MESSAGE",
        checks=1,
    )
    sent = events(result, "sent")
    assert [(s["index"], s["status"], s["localState"]) for s in sent] == [
        (0, "SEND_OK", "COMMIT_MESSAGE"),
        (1, "SEND_OK", "ROLLBACK_MESSAGE"),
        (2, "SEND_OK", "UNKNOW"),
    ], result.describe()
    assert [e["state"] for e in events(result, "executed")] == [
        "COMMIT_MESSAGE",
        "ROLLBACK_MESSAGE",
        "UNKNOW",
    ]
    # Only the undecided transaction is checked, and the check carries the message as the producer sent it.
    checked = events(result, "checked")
    assert {c["properties"]["idx"] for c in checked} == {"2"}, result.describe()
    first = checked[0]
    assert first["topic"] == topic
    assert first["body"] == "java-2"
    # The transaction id is the unique key: the same in the listener, the send result and the check.
    assert first["transactionId"] == sent[2]["msgId"] == events(result, "executed")[2]["transactionId"]
    assert first["properties"]["PGROUP"] == group
    assert first["properties"]["TRAN_MSG"] == "true"

    bodies = run(consumed(server, topic, {b"java-0", b"java-2"}))
    assert bodies == [b"java-0", b"java-2"]


def test_java_check_answering_unknown_is_asked_again_and_commits_once(
    server: ServerProcess, java: JavaPeer
) -> None:
    topic = new_topic(server, "java-tx-late")
    result = java.run(
        "transact",
        topic=topic,
        group=unique("JTX"),
        local="UNKNOW",
        answers="UNKNOW,COMMIT_MESSAGE",
        checks=2,
    )
    checked = events(result, "checked")
    assert [(c["nth"], c["state"]) for c in checked][:2] == [(1, "UNKNOW"), (2, "COMMIT_MESSAGE")]
    # Each check re-stores the half message with one more check counted (Java TRANSACTION_CHECK_TIMES).
    assert [c["properties"].get("TRANSACTION_CHECK_TIMES") for c in checked[:2]] == ["1", "2"]
    assert run(consumed(server, topic, {b"java-0"})) == [b"java-0"]


def test_java_transaction_left_unknown_is_checked_at_most_check_max_times_and_never_delivered(
    server: ServerProcess, java: JavaPeer
) -> None:
    topic = new_topic(server, "java-tx-never")
    result = java.run(
        "transact",
        topic=topic,
        group=unique("JTX"),
        local="UNKNOW",
        answers="UNKNOW",
        checks=CHECK_MAX,
        linger_ms=2000,  # several check intervals: a check past the maximum would show here
    )
    assert [c["nth"] for c in events(result, "checked")] == list(range(1, CHECK_MAX + 1)), result.describe()
    # Discarded, not committed: the real topic never got a message.
    assert run(max_offsets(server.broker, topic, 4)) == [0, 0, 0, 0]
