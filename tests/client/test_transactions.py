"""Transactional messages end to end: half messages, END_TRANSACTION, the broker's checks, restarts."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.support import RawClient, ServerProcess, create_topic, eventually, unique
from tidemq.client import api
from tidemq.client.message import Message, SendStatus
from tidemq.client.transaction import LocalTransactionState, TransactionProducer
from tidemq.record import MessageExt, Prop, SysFlag, decode_offset_msg_id, encode_properties, iter_records
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.headers import EndTransactionRequestHeader

pytestmark = pytest.mark.e2e

#: Short enough that checks come within a test: checked 0.5 s after birth, every 0.3 s, at most 3 times.
TX_OPTIONS = (
    "--transaction-timeout",
    "0.5",
    "--transaction-check-interval",
    "0.3",
    "--transaction-check-max",
    "3",
)


@pytest.fixture(scope="module")
def tx_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("tx") / "data", *TX_OPTIONS).start()
    yield proc
    proc.stop()


async def _visible(client: RawClient, topic: str) -> list[MessageExt]:
    out: list[MessageExt] = []
    for qid in range(4):
        out += await client.drain(topic, qid, group=unique("cg"))
    return out


async def test_commit_is_visible_once_and_only_after_the_commit(tx_server: ServerProcess) -> None:
    topic = unique("tx-commit")
    await create_topic(tx_server.broker, topic, routed_by=tx_server.namesrv)
    raw = await RawClient.open(tx_server.broker)
    seen_before_commit: list[int] = []

    async def executor(msg: Message, arg: object) -> LocalTransactionState:
        seen_before_commit.append(len(await _visible(raw, topic)))
        return LocalTransactionState.COMMIT_MESSAGE

    producer = TransactionProducer(
        unique("txpg"), tx_server.namesrv, executor, lambda m: pytest.fail("checked")
    )
    await producer.start()
    try:
        result = await producer.send_in_transaction(Message(topic, b"order-1", tags="t"), "arg")
        assert result.status is SendStatus.SEND_OK
        assert result.local_transaction_state is LocalTransactionState.COMMIT_MESSAGE
        msgs = await eventually(lambda: _visible(raw, topic), what="the committed message")
        await asyncio.sleep(1.5)  # past the check timeout: nothing more may show up
        msgs = await _visible(raw, topic)
    finally:
        await producer.shutdown()
        raw.close()
    assert seen_before_commit == [0]
    assert [m.body for m in msgs] == [b"order-1"]
    assert msgs[0].properties[Prop.TRAN_MSG] == "true"
    assert msgs[0].properties[Prop.UNIQ_KEY] == result.msg_id
    assert SysFlag.transaction_value(msgs[0].sys_flag) == SysFlag.TRANSACTION_COMMIT


async def test_rollback_is_never_visible(tx_server: ServerProcess) -> None:
    topic = unique("tx-rollback")
    await create_topic(tx_server.broker, topic, routed_by=tx_server.namesrv)
    checked: list[MessageExt] = []

    def checker(msg: MessageExt) -> LocalTransactionState:
        checked.append(msg)
        return LocalTransactionState.COMMIT_MESSAGE

    producer = TransactionProducer(
        unique("txpg"), tx_server.namesrv, lambda m, a: LocalTransactionState.ROLLBACK_MESSAGE, checker
    )
    raw = await RawClient.open(tx_server.broker)
    await producer.start()
    try:
        result = await producer.send_in_transaction(Message(topic, b"nope"))
        assert result.local_transaction_state is LocalTransactionState.ROLLBACK_MESSAGE
        await asyncio.sleep(2.0)
        assert await _visible(raw, topic) == []
    finally:
        await producer.shutdown()
        raw.close()
    assert checked == []


async def test_unknown_is_checked_and_the_checker_commits(tx_server: ServerProcess) -> None:
    topic = unique("tx-unknown")
    await create_topic(tx_server.broker, topic, routed_by=tx_server.namesrv)
    checked: list[MessageExt] = []

    async def checker(msg: MessageExt) -> LocalTransactionState:
        checked.append(msg)
        return LocalTransactionState.COMMIT_MESSAGE

    producer = TransactionProducer(
        unique("txpg"), tx_server.namesrv, lambda m, a: LocalTransactionState.UNKNOW, checker
    )
    raw = await RawClient.open(tx_server.broker)
    await producer.start()
    try:
        result = await producer.send_in_transaction(Message(topic, b"later"))
        assert result.local_transaction_state is LocalTransactionState.UNKNOW
        await eventually(lambda: _visible(raw, topic), what="the message the checker committed")
        await asyncio.sleep(1.5)
        msgs = await _visible(raw, topic)
    finally:
        await producer.shutdown()
        raw.close()
    assert [m.body for m in msgs] == [b"later"]
    assert len(checked) == 1
    assert checked[0].topic == topic
    assert checked[0].properties[Prop.UNIQ_KEY] == result.msg_id
    assert checked[0].properties[Prop.TRANSACTION_CHECK_TIMES] == "1"


async def _raw_producer(addr: str, group: str) -> RawClient:
    """A producer that registers its group by heartbeat and then never answers a check."""
    raw = await RawClient.open(addr, client_id=unique("127.0.0.1@raw"))
    body = {"clientID": raw.client_id, "producerDataSet": [{"groupName": group}], "consumerDataSet": []}
    resp = await raw.call(RequestCode.HEART_BEAT, body=orjson.dumps(body))
    assert resp.code == ResponseCode.SUCCESS
    return raw


async def _send_half(raw: RawClient, topic: str, group: str, body: bytes, uniq: str) -> tuple[int, int]:
    """Send a half message; returns (commit-log offset, half queue offset)."""
    props = {Prop.TRAN_MSG: "true", Prop.PGROUP: group, Prop.UNIQ_KEY: uniq, Prop.WAIT: "true"}
    header = api.send_header(
        topic, queue_id=0, properties=encode_properties(props), producer_group=group, sys_flag=4
    )
    resp = await raw.call(RequestCode.SEND_MESSAGE_V2, header.to_compact_ext(), body)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return decode_offset_msg_id(resp.ext_fields["msgId"])[1], int(resp.ext_fields["queueOffset"])


async def _end(
    raw: RawClient, group: str, offsets: tuple[int, int], decision: int, uniq: str = "u"
) -> tuple[int, str | None]:
    header = EndTransactionRequestHeader(group, offsets[1], offsets[0], decision, uniq, False, uniq)
    resp = await raw.call(RequestCode.END_TRANSACTION, header.to_ext())
    return resp.code, resp.remark


def _checks(raw: RawClient) -> list[MessageExt]:
    return [next(iter_records(r.body)) for r in raw.received if r.code == RequestCode.CHECK_TRANSACTION_STATE]


async def test_an_unanswered_transaction_is_checked_at_most_max_times_then_discarded(
    tx_server: ServerProcess,
) -> None:
    topic, group = unique("tx-silent"), unique("txpg")
    await create_topic(tx_server.broker, topic)
    raw = await _raw_producer(tx_server.broker, group)
    try:
        await _send_half(raw, topic, group, b"silent", "SILENT-1")
        await eventually(lambda: len(_checks(raw)) >= 3, what="three checks")
        await asyncio.sleep(2.0)
        checks = _checks(raw)
        assert [m.properties[Prop.TRANSACTION_CHECK_TIMES] for m in checks] == ["1", "2", "3"]
        assert {m.topic for m in checks} == {topic}
        assert await _visible(raw, topic) == []
    finally:
        raw.close()


async def test_bad_end_transaction_gets_system_error_with_a_remark(tx_server: ServerProcess) -> None:
    topic, group = unique("tx-bad"), unique("txpg")
    await create_topic(tx_server.broker, topic)
    raw = await _raw_producer(tx_server.broker, group)
    try:
        offsets = await _send_half(raw, topic, group, b"x", "BAD-1")
        code, remark = await _end(raw, group, (offsets[0] + 1, offsets[1]), SysFlag.TRANSACTION_COMMIT)
        assert code == ResponseCode.SYSTEM_ERROR and "Find prepared transaction message failed" in (
            remark or ""
        )
        code, remark = await _end(raw, "other-group", offsets, SysFlag.TRANSACTION_COMMIT)
        assert (code, remark) == (ResponseCode.SYSTEM_ERROR, "The producer group wrong")
        code, remark = await _end(raw, group, (offsets[0], offsets[1] + 7), SysFlag.TRANSACTION_COMMIT)
        assert (code, remark) == (ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong")
        assert await _end(raw, group, offsets, SysFlag.TRANSACTION_COMMIT) == (ResponseCode.SUCCESS, None)
        code, remark = await _end(raw, group, offsets, SysFlag.TRANSACTION_ROLLBACK)
        assert code == ResponseCode.SYSTEM_ERROR and "BAD-1 is already committed" in (remark or "")
        assert [m.body for m in await _visible(raw, topic)] == [b"x"]
    finally:
        raw.close()


async def test_after_sigkill_decided_transactions_stay_decided_and_undecided_are_checked(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    topic, group = unique("tx-kill"), unique("txpg")
    slow = ("--transaction-timeout", "0.5", "--transaction-check-interval", "0.3")
    first = ServerProcess(data, "--transaction-check-interval", "3600").start()
    try:
        await create_topic(first.broker, topic)
        raw = await _raw_producer(first.broker, group)
        committed = await _send_half(raw, topic, group, b"committed", "KILL-C")
        rolled_back = await _send_half(raw, topic, group, b"rolled-back", "KILL-R")
        await _send_half(raw, topic, group, b"open", "KILL-O")
        assert (await _end(raw, group, committed, SysFlag.TRANSACTION_COMMIT))[0] == ResponseCode.SUCCESS
        assert (await _end(raw, group, rolled_back, SysFlag.TRANSACTION_ROLLBACK))[0] == ResponseCode.SUCCESS
        raw.close()
    finally:
        first.kill()
    second = ServerProcess(data, *slow).start()
    try:
        raw = await _raw_producer(second.broker, group)
        code, remark = await _end(raw, group, committed, SysFlag.TRANSACTION_COMMIT)
        assert code == ResponseCode.SYSTEM_ERROR and "already" in (remark or "")
        await eventually(lambda: _checks(raw), what="a check of the open transaction")
        await asyncio.sleep(1.0)
        assert {m.properties[Prop.UNIQ_KEY] for m in _checks(raw)} == {"KILL-O"}
        assert [m.body for m in await _visible(raw, topic)] == [b"committed"]
        raw.close()
    finally:
        second.stop()


def _stored_half_position(data: Path) -> int:
    """The scan position as the broker last wrote it to its consumer offset table (-1: none yet)."""
    path = data / "config" / "consumerOffset.json"
    table = orjson.loads(path.read_bytes()).get("offsetTable", {}) if path.exists() else {}
    return int(table.get("RMQ_SYS_TRANS_HALF_TOPIC@CID_RMQ_SYS_TRANS", {}).get("0", -1))


async def test_after_sigkill_a_start_reads_from_the_scan_position_and_open_ones_commit_once(
    tmp_path: Path,
) -> None:
    """Many decided transactions, then open ones: the stored scan position stops at the first open one;
    after a SIGKILL the checker commits each open one exactly once, and no decided one is checked or
    committed again."""
    data = tmp_path / "data"
    topic, group = unique("tx-pos"), unique("txpg")
    first = ServerProcess(
        data, "--transaction-timeout", "3600", "--transaction-check-interval", "0.3"
    ).start()
    try:
        await create_topic(first.broker, topic, routed_by=first.namesrv)
        raw = await _raw_producer(first.broker, group)
        decided = []
        for i in range(40):
            offsets = await _send_half(raw, topic, group, b"decided-%d" % i, f"POS-D{i}")
            decision = SysFlag.TRANSACTION_COMMIT if i % 4 else SysFlag.TRANSACTION_ROLLBACK
            assert (await _end(raw, group, offsets, decision))[0] == ResponseCode.SUCCESS
            decided.append(offsets)
        opened = [await _send_half(raw, topic, group, b"open-%d" % i, f"POS-O{i}") for i in range(2)]
        await eventually(
            lambda: _stored_half_position(data) == opened[0][1],
            what="the scan position at the first open one",
        )
        raw.close()
    finally:
        first.kill()
    committed = [b"decided-%d" % i for i in range(40) if i % 4]

    second = ServerProcess(data, *TX_OPTIONS).start()
    checked: list[MessageExt] = []

    async def checker(msg: MessageExt) -> LocalTransactionState:
        checked.append(msg)
        return LocalTransactionState.COMMIT_MESSAGE

    producer = TransactionProducer(
        group, second.namesrv, lambda m, a: LocalTransactionState.COMMIT_MESSAGE, checker
    )
    raw = await RawClient.open(second.broker)
    try:
        code, remark = await _end(raw, group, decided[1], SysFlag.TRANSACTION_COMMIT)
        assert code == ResponseCode.SYSTEM_ERROR and "already decided" in (remark or "")
        await producer.start()
        await producer.send_in_transaction(Message(topic, b"new"))  # registers the group with the broker

        async def both_open_ones() -> bool:
            bodies = [m.body for m in await _visible(raw, topic)]
            return b"open-0" in bodies and b"open-1" in bodies

        await eventually(both_open_ones, what="the checker's commits of the open transactions")
        await asyncio.sleep(1.5)  # several check passes: nothing more may show up
        bodies = sorted(m.body for m in await _visible(raw, topic))
    finally:
        await producer.shutdown()
        raw.close()
        second.stop()
    assert bodies == sorted([*committed, b"open-0", b"open-1", b"new"]), "each exactly once"
    assert {m.properties[Prop.UNIQ_KEY] for m in checked} == {"POS-O0", "POS-O1"}, "no decided one checked"
