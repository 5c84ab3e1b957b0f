"""The transaction rules on a broker whose store is in a temp dir, processors called directly (no socket):
half messages stay out of their real topic, END_TRANSACTION commits or rolls back once, the op log
brings the decisions back after a reopen, and the check pass picks what to check or discard by age and
check count. tests/client/test_transactions.py runs the same over the wire."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

from tests.broker.processor_support import Peer, broker_on, call
from tidemq.broker.broker import Broker
from tidemq.broker.clients import ClientChannel
from tidemq.broker.processors import admin, send, transaction
from tidemq.broker.transaction_scan import TransactionScan
from tidemq.broker.transactions import HALF_POSITION_KEY, OP_POSITION_KEY, Decision
from tidemq.client import api
from tidemq.record import Prop, SysFlag, decode_offset_msg_id, decode_record, encode_properties, pack_host
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
    SendMessageRequestHeader,
)
from tidemq.remoting.names import TIMER_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from tidemq.remoting.transport import RemotingConnection


class Producer(Peer):
    """A producer's connection as END_TRANSACTION's log line names it."""

    address = "127.0.0.1:40000"


TOPIC = "Payments"
GROUP = "TXPG"


async def opened(broker: Broker) -> Broker:
    """The store host a started broker would have, and the topic the tests send to."""
    broker.store_host = pack_host("127.0.0.1", 10911)[0]
    ok = await call(admin.create_topic, broker, api.create_topic_request(TOPIC, 1))
    assert ok.code == ResponseCode.SUCCESS, ok.remark
    return broker


async def send_half(
    broker: Broker, body: bytes, key: str | None, extra: dict[str, str] | None = None
) -> tuple[int, int]:
    """A prepared send as a transaction producer makes it; returns its half queue offset and commit log
    offset (what END_TRANSACTION names)."""
    header = SendMessageRequestHeader(
        producer_group=GROUP,
        topic=TOPIC,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=0,
        sys_flag=SysFlag.TRANSACTION_PREPARED,
        born_timestamp=int(time.time() * 1000),
        flag=0,
        properties=encode_properties(
            {
                Prop.TRAN_MSG: "true",
                Prop.PGROUP: GROUP,
                **({Prop.UNIQ_KEY: key} if key else {}),
                **(extra or {}),
            }
        ),
    )
    sent = await call(send.send_message, broker, api.send_request(header, body))
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    return int(sent.ext_fields["queueOffset"]), decode_offset_msg_id(sent.ext_fields["msgId"])[1]


def end_request(half: tuple[int, int], decision: int, group: str = GROUP) -> RemotingCommand:
    header = EndTransactionRequestHeader(
        producer_group=group,
        tran_state_table_offset=half[0],
        commit_log_offset=half[1],
        commit_or_rollback=decision,
        msg_id="",
    )
    return RemotingCommand(RequestCode.END_TRANSACTION, ext_fields=header.to_ext())


def depth(broker: Broker, topic: str) -> int:
    return broker.store.max_offset(topic, 0)


def stored(broker: Broker, topic: str, queue_offset: int) -> Any:
    cq = broker.store.find_queue(topic, 0)
    assert cq is not None
    entry = cq.entry(queue_offset)
    assert entry is not None
    data = broker.store.read_message(entry[0])
    assert data is not None
    return decode_record(data, decompress=False)


async def test_a_half_message_is_invisible_until_committed_and_a_second_decision_is_refused(
    tmp_path: Path,
) -> None:
    async with broker_on(tmp_path) as broker:
        await opened(broker)
        half = await send_half(broker, b"pay 10", "tx-1")
        assert depth(broker, TOPIC) == 0, "a half message is not in its real topic"
        assert depth(broker, TRANS_HALF_TOPIC) == 1
        held = stored(broker, TRANS_HALF_TOPIC, 0)
        assert held.properties[Prop.REAL_TOPIC] == TOPIC and held.properties[Prop.REAL_QID] == "0"

        done = await call(transaction.end_transaction, broker, end_request(half, SysFlag.TRANSACTION_COMMIT))
        assert done.code == ResponseCode.SUCCESS, done.remark
        assert depth(broker, TOPIC) == 1 and depth(broker, TRANS_OP_HALF_TOPIC) == 1
        committed = stored(broker, TOPIC, 0)
        assert committed.body == b"pay 10" and committed.properties[Prop.UNIQ_KEY] == "tx-1"
        assert SysFlag.transaction_value(committed.sys_flag) == SysFlag.TRANSACTION_COMMIT
        assert stored(broker, TRANS_OP_HALF_TOPIC, 0).body == b"0", "the op names the half queue offset"

        for late in (SysFlag.TRANSACTION_COMMIT, SysFlag.TRANSACTION_ROLLBACK):
            again = await call(transaction.end_transaction, broker, end_request(half, late))
            assert again.code == ResponseCode.SYSTEM_ERROR
            assert "tx-1 is already committed" in (again.remark or "")
        assert depth(broker, TOPIC) == 1, "committed once"


async def test_a_rollback_stores_only_its_op_and_an_undecided_answer_changes_nothing(tmp_path: Path) -> None:
    async with broker_on(tmp_path) as broker:
        await opened(broker)
        half = await send_half(broker, b"pay 20", "tx-2")
        undecided = transaction.end_transaction(
            broker, cast(RemotingConnection, Producer()), end_request(half, SysFlag.TRANSACTION_NOT_TYPE)
        )
        assert undecided is None, "Java answers nothing to an UNKNOW"
        assert "tx-2" in broker.transactions.pending and depth(broker, TRANS_OP_HALF_TOPIC) == 0

        done = await call(
            transaction.end_transaction, broker, end_request(half, SysFlag.TRANSACTION_ROLLBACK)
        )
        assert done.code == ResponseCode.SUCCESS, done.remark
        assert depth(broker, TOPIC) == 0 and depth(broker, TRANS_OP_HALF_TOPIC) == 1
        again = await call(transaction.end_transaction, broker, end_request(half, SysFlag.TRANSACTION_COMMIT))
        assert "tx-2 is already rolled back" in (again.remark or "")
        assert depth(broker, TOPIC) == 0


async def test_an_end_transaction_naming_the_wrong_half_message_is_refused_with_javas_remarks(
    tmp_path: Path,
) -> None:
    async with broker_on(tmp_path) as broker:
        await opened(broker)
        half = await send_half(broker, b"pay 30", "tx-3")
        commit = SysFlag.TRANSACTION_COMMIT
        cases = {
            "The producer group wrong": end_request(half, commit, group="OTHER"),
            "The transaction state table offset wrong": end_request((half[0] + 1, half[1]), commit),
            "no half message at commit log offset": end_request((half[0], half[1] + 1), commit),
        }
        for remark, req in cases.items():
            refused = await call(transaction.end_transaction, broker, req)
            assert refused.code == ResponseCode.SYSTEM_ERROR and remark in (refused.remark or ""), remark
        assert depth(broker, TOPIC) == 0 and "tx-3" in broker.transactions.pending


async def test_decisions_and_open_half_messages_are_recovered_from_the_half_and_op_queues(
    tmp_path: Path,
) -> None:
    async with broker_on(tmp_path) as broker:
        await opened(broker)
        decided = await send_half(broker, b"decided", "tx-a")
        left_open = await send_half(broker, b"open", "tx-b")
        done = await call(
            transaction.end_transaction, broker, end_request(decided, SysFlag.TRANSACTION_COMMIT)
        )
        assert done.code == ResponseCode.SUCCESS, done.remark

    async with broker_on(tmp_path) as reopened:
        await opened(reopened)
        service = reopened.transactions
        service.start()
        try:
            assert set(service.pending) == {"tx-b"}
            assert service.decided == {"tx-a": Decision.DECIDED}
            again = await call(
                transaction.end_transaction, reopened, end_request(decided, SysFlag.TRANSACTION_COMMIT)
            )
            assert "tx-a is already decided" in (again.remark or "")
            late = await call(
                transaction.end_transaction, reopened, end_request(left_open, SysFlag.TRANSACTION_COMMIT)
            )
            assert late.code == ResponseCode.SUCCESS, late.remark
            assert [stored(reopened, TOPIC, i).body for i in range(depth(reopened, TOPIC))] == [
                b"decided",
                b"open",
            ]
        finally:
            await service.close()


async def test_the_check_pass_asks_a_producer_about_old_half_messages_then_discards_them(
    tmp_path: Path,
) -> None:
    async with broker_on(tmp_path) as broker:
        await opened(broker)
        producer = Producer()
        broker.clients.producers[GROUP] = {cast(RemotingConnection, producer): cast(ClientChannel, None)}
        config = broker.config
        config.transaction_check_max = 2
        await send_half(broker, b"slow", "tx-c")
        service = broker.transactions

        config.transaction_timeout_s = 3600.0
        service.check_once()
        assert producer.told == [], "too young to be checked"

        config.transaction_timeout_s = 0.0
        for times in (1, 2):
            service.check_once()
            assert len(producer.told) == times
            ask = producer.told[-1]
            assert ask.code == RequestCode.CHECK_TRANSACTION_STATE
            header = CheckTransactionStateRequestHeader.from_ext(ask.ext_fields)
            copy = stored(broker, TRANS_HALF_TOPIC, times)
            assert (header.tran_state_table_offset, header.commit_log_offset) == (
                copy.queue_offset,
                copy.commit_log_offset,
            ), "the check names the newest copy of the half message"
            assert copy.properties[Prop.TRANSACTION_CHECK_TIMES] == str(times)
            asked = decode_record(bytes(ask.body), decompress=False)
            assert (asked.topic, asked.body, header.transaction_id) == (TOPIC, b"slow", "tx-c")
            assert service.pending["tx-c"].check_times == times

        service.check_once()
        assert len(producer.told) == 2, "no check past the maximum"
        assert service.decided["tx-c"] is Decision.DISCARDED and service.discarded == 1
        assert "tx-c" not in service.pending and depth(broker, TRANS_OP_HALF_TOPIC) == 1
        service.check_once()
        assert len(producer.told) == 2 and depth(broker, TOPIC) == 0


async def test_a_half_message_sent_without_a_unique_key_stays_one_transaction_across_its_checks(
    tmp_path: Path,
) -> None:
    async with broker_on(tmp_path) as broker:
        await opened(broker)
        producer = Producer()
        broker.clients.producers[GROUP] = {cast(RemotingConnection, producer): cast(ClientChannel, None)}
        broker.config.transaction_timeout_s = 0.0
        await send_half(broker, b"no key", None)
        service = broker.transactions
        service.check_once()
        service.check_once()
        assert len(producer.told) == 2 and len(service.pending) == 1, "every copy is the same transaction"
        newest = stored(broker, TRANS_HALF_TOPIC, 2)
        newest_half = (newest.queue_offset, newest.commit_log_offset)
        done = await call(
            transaction.end_transaction, broker, end_request(newest_half, SysFlag.TRANSACTION_COMMIT)
        )
        assert done.code == ResponseCode.SUCCESS, done.remark
        assert service.pending == {} and depth(broker, TOPIC) == 1
        service.check_once()
        assert len(producer.told) == 2, "nothing is left open to check"


async def test_a_timer_on_a_half_message_starts_at_the_commit_as_in_java(tmp_path: Path) -> None:
    """Java's put hook runs the timer transform on a COMMIT-type message, never on the PREPARED half."""
    async with broker_on(tmp_path) as broker:
        await opened(broker)
        half = await send_half(broker, b"later", "tx-t", {Prop.TIMER_DELAY_SEC: "60"})
        held = stored(broker, TRANS_HALF_TOPIC, 0)
        assert Prop.TIMER_OUT_MS not in held.properties and held.properties[Prop.TIMER_DELAY_SEC] == "60"
        before = int(time.time() * 1000)
        done = await call(transaction.end_transaction, broker, end_request(half, SysFlag.TRANSACTION_COMMIT))
        assert done.code == ResponseCode.SUCCESS, done.remark
        assert depth(broker, TOPIC) == 0, "not visible before its timer"
        timed = stored(broker, TIMER_TOPIC, 0)
        assert timed.body == b"later" and timed.properties[Prop.REAL_TOPIC] == TOPIC
        assert int(timed.properties[Prop.TIMER_OUT_MS]) >= before + 60_000

        bad = await send_half(broker, b"too late", "tx-u", {Prop.TIMER_DELAY_SEC: str(10 * 86_400)})
        refused = await call(
            transaction.end_transaction, broker, end_request(bad, SysFlag.TRANSACTION_COMMIT)
        )
        assert refused.code == ResponseCode.SYSTEM_ERROR and "timer message illegal" in (refused.remark or "")
        assert "tx-u" in broker.transactions.pending, "the transaction stays open, as in Java"


def test_the_scan_position_passes_settled_half_messages_and_stops_at_an_open_one() -> None:
    """The rule alone: decided transactions and superseded copies are passed, the newest copy of an open
    transaction holds the half position, and an op entry is passed once no copy of its transaction is
    left at or past the half position."""
    scan = TransactionScan(0, 0)
    newest = {"a": 0, "b": 3, "c": 2, "d": 4}
    open_now = {"b", "d"}

    def is_open(offset: int, tid: str) -> bool:
        return tid in open_now and newest[tid] <= offset

    for offset, tid in enumerate(["a", "b", "c", "b", "d"]):  # b's first copy re-put by a check at 3
        scan.half_stored(offset, tid)
    scan.op_stored(0, "a")
    scan.op_stored(1, "c")
    target = scan.next_half_position(is_open)
    assert target == 3, "the old copy of b is passed; b's newest copy, open, holds the position"
    assert scan.advance(target) == ["a", "c"] and (scan.half_position, scan.op_position) == (3, 2)
    assert scan.next_half_position(is_open) == 3, "still open: still held"

    open_now.discard("b")
    scan.op_stored(2, "b")
    assert scan.next_half_position(is_open) == 4, "d, open, now holds it"
    assert scan.advance(4) == ["b"] and (scan.half_position, scan.op_position) == (4, 3)
    open_now.discard("d")
    scan.op_stored(3, "d")
    assert scan.next_half_position(is_open) == 5
    assert scan.advance(5) == ["d"] and (scan.half_position, scan.op_position) == (5, 4)
    assert scan.advance(2) == [] and scan.half_position == 5, "never back"


async def test_a_start_reads_from_the_scan_position_and_a_half_message_below_it_counts_as_decided(
    tmp_path: Path,
) -> None:
    async with broker_on(tmp_path) as broker:
        await opened(broker)
        before = [await send_half(broker, b"before-%d" % i, f"tx-before-{i}") for i in range(5)]
        left_open = await send_half(broker, b"open", "tx-open")
        after = [await send_half(broker, b"after-%d" % i, f"tx-after-{i}") for i in range(3)]
        for i, half in enumerate(before + after):
            decision = SysFlag.TRANSACTION_COMMIT if i % 2 == 0 else SysFlag.TRANSACTION_ROLLBACK
            done = await call(transaction.end_transaction, broker, end_request(half, decision))
            assert done.code == ResponseCode.SUCCESS, done.remark
        await broker.transactions.advance()
        offsets = broker.consumer_offsets
        assert offsets.get(HALF_POSITION_KEY, 0) == left_open[0], "the open transaction holds the position"
        assert offsets.get(OP_POSITION_KEY, 0) == 5, "the op entries of the five before it are passed"
        assert set(broker.transactions.decided) == {f"tx-after-{i}" for i in range(3)}
        committed_before = depth(broker, TOPIC)
        offsets.persist(force=True)

    async with broker_on(tmp_path) as reopened:
        await opened(reopened)
        service = reopened.transactions
        service.start()
        try:
            assert set(service.pending) == {"tx-open"}
            assert set(service.decided) == {f"tx-after-{i}" for i in range(3)}, "only ops past the position"
            for half in (before[0], before[1], after[0]):
                again = await call(
                    transaction.end_transaction, reopened, end_request(half, SysFlag.TRANSACTION_COMMIT)
                )
                assert again.code == ResponseCode.SYSTEM_ERROR and "already decided" in (again.remark or "")
            assert depth(reopened, TOPIC) == committed_before, "never committed twice"
            late = await call(
                transaction.end_transaction, reopened, end_request(left_open, SysFlag.TRANSACTION_COMMIT)
            )
            assert late.code == ResponseCode.SUCCESS, late.remark
            await service.advance()
            assert reopened.consumer_offsets.get(HALF_POSITION_KEY, 0) == depth(reopened, TRANS_HALF_TOPIC)
            assert service.decided == {}, "every decision is behind the position now"
        finally:
            await service.close()
