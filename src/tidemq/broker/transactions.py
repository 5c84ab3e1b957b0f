"""Transactional messages (Java TransactionalMessageServiceImpl, TransactionalMessageBridge and
TransactionalMessageCheckService; docs/protocols/rocketmq-messages.md#transactions).

A half message is stored in RMQ_SYS_TRANS_HALF_TOPIC queue 0 with its real topic and queue in
REAL_TOPIC/REAL_QID, so no consumer of the real topic sees it. A decision (END_TRANSACTION) is recorded
in the op log, RMQ_SYS_TRANS_OP_HALF_TOPIC queue 0, in the same single write that stores a committed
message under its real topic: a SIGKILL leaves both or neither, so a decided transaction is never
committed twice. A check re-stores the half message with TRANSACTION_CHECK_TIMES one higher (as Java
re-puts it); every copy carries the producer's unique key, which is the transaction id here, so the
newest copy is the live one and a decision on any copy decides the transaction.

The state (live half messages, decided transactions) is kept in memory. A start rebuilds it from the
scan position on (broker/transaction_scan.py): Java's consumer offsets of the system group
CID_RMQ_SYS_TRANS on the half and op queues, kept in the broker's consumer offset table as Java keeps
them (so admin tools see them too). The position moves only at a check pass, and only once the commit
log is fsynced past every op entry and copy that let it move, so a SIGKILL can never leave it past a
transaction whose decision was lost. A half message below it whose transaction is not open counts as
decided.

A check goes to a remoting producer of the half message's group when one is connected, else to the first
registered check target that takes it (``check_targets``: the gRPC front-end registers one that pushes
the check down a 5.x producer's Telemetry stream), so the service knows no front-end but remoting's.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from tidemq.aio import cancel_and_wait
from tidemq.broker.timers import MESSAGES_QUEUE as TIMER_MESSAGES_QUEUE
from tidemq.broker.timers import TimerRejected
from tidemq.broker.transaction_scan import TransactionScan
from tidemq.record import (
    MessageExt,
    Prop,
    SysFlag,
    decode_record,
    encode_properties,
    encode_record,
    offset_msg_id,
)
from tidemq.remoting.codes import RequestCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.headers import CheckTransactionStateRequestHeader
from tidemq.remoting.names import (
    TIMER_TOPIC,
    TRANS_CHECK_GROUP,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TRANS_OP_TAG,
)
from tidemq.remoting.transport import RemotingConnection
from tidemq.store import StoreError
from tidemq.store.requests import AppendRequest, PutResult

if TYPE_CHECKING:
    from tidemq.broker.broker import Broker

log = logging.getLogger(__name__)

#: The consumer offset table's keys of the scan position (Java's ``topic@group``).
HALF_POSITION_KEY = f"{TRANS_HALF_TOPIC}@{TRANS_CHECK_GROUP}"
OP_POSITION_KEY = f"{TRANS_OP_HALF_TOPIC}@{TRANS_CHECK_GROUP}"


class Decision(Enum):
    COMMITTED = "committed"
    ROLLED_BACK = "rolled back"
    DISCARDED = "discarded after too many checks"
    #: Recovered from the op log, which does not say which way it went.
    DECIDED = "decided"


@dataclass(slots=True)
class HalfMessage:
    """The newest stored copy of an undecided transaction's half message."""

    transaction_id: str
    commit_log_offset: int
    queue_offset: int
    born_timestamp: int
    check_times: int


#: Asks a producer of ``group`` about the stored copy of a half message; False when it has none.
CheckTarget = Callable[[str, MessageExt], bool]


class TransactionError(Exception):
    """An END_TRANSACTION that names no live half message; the text is the response's remark."""


def transaction_id(msg: MessageExt) -> str:
    """The producer's unique key: the same on every copy of a half message, and on the committed one."""
    return msg.properties.get(Prop.UNIQ_KEY) or f"offset:{msg.commit_log_offset}"


class TransactionService:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.pending: dict[str, HalfMessage] = {}
        self.decided: dict[str, Decision] = {}
        self.checks_sent = 0
        self.discarded = 0
        #: Other front-ends' producers, asked when no remoting producer of the group is connected.
        self.check_targets: list[CheckTarget] = []
        self.scan = TransactionScan(0, 0)
        self._task: asyncio.Task[None] | None = None

    # --- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        self._recover()
        self._task = asyncio.create_task(self._check_loop())

    async def close(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])
            try:
                await self.advance()
            except StoreError as exc:
                log.warning("transactions: scan position not advanced at close: %s", exc)

    def _recover(self) -> None:
        """Rebuild the live half messages and the decided transactions from the scan position on."""
        half_from = self._position(TRANS_HALF_TOPIC, HALF_POSITION_KEY)
        op_from = self._position(TRANS_OP_HALF_TOPIC, OP_POSITION_KEY)
        self.scan = TransactionScan(half_from, op_from)
        store = self.broker.store
        for qoff in range(half_from, store.max_offset(TRANS_HALF_TOPIC, 0)):
            msg = self._half_at(qoff)
            if msg is not None:
                self._track(msg)
            else:
                self.scan.half_stored(qoff, None)
        for qoff in range(op_from, store.max_offset(TRANS_OP_HALF_TOPIC, 0)):
            op = self._read_queue(TRANS_OP_HALF_TOPIC, qoff)
            body = op.body.decode(errors="replace") if op is not None else ""
            half = self._half_at(int(body)) if body.isdigit() else None
            tid = transaction_id(half) if half is not None else None
            if tid is not None:
                self.pending.pop(tid, None)
                self.decided[tid] = Decision.DECIDED
            self.scan.op_stored(qoff, tid)
        log.info(
            "transactions: read from half offset %d and op offset %d: %d undecided, %d decided",
            half_from,
            op_from,
            len(self.pending),
            len(self.decided),
        )

    def _position(self, topic: str, key: str) -> int:
        """Where a start reads ``topic`` from: the stored position, else the queue's first offset (Java
        fetchConsumeOffset), kept within what the queue holds."""
        store = self.broker.store
        low, high = store.min_offset(topic, 0), store.max_offset(topic, 0)
        stored = self.broker.consumer_offsets.get(key, 0)
        return low if stored is None else max(low, min(stored, high))

    async def advance(self) -> None:
        """Move the scan position over the settled half and op entries, once the commit log is durable
        past them (their op entries, and the newer copies of re-put half messages, all lie before its end
        now), then record it where the next start reads it."""
        target = self.scan.next_half_position(self._is_open_copy)
        store = self.broker.store
        await store.wait_durable(store.commitlog.max_offset)
        before = (self.scan.half_position, self.scan.op_position)
        for tid in self.scan.advance(target):
            if tid not in self.pending:
                self.decided.pop(tid, None)
        if (self.scan.half_position, self.scan.op_position) != before:
            self.broker.consumer_offsets.set(HALF_POSITION_KEY, 0, self.scan.half_position)
            self.broker.consumer_offsets.set(OP_POSITION_KEY, 0, self.scan.op_position)

    def _is_open_copy(self, queue_offset: int, tid: str) -> bool:
        """Whether the half message at ``queue_offset`` is the newest copy of an open transaction."""
        half = self.pending.get(tid)
        return half is not None and half.queue_offset <= queue_offset

    def _read_queue(self, topic: str, queue_offset: int) -> MessageExt | None:
        cq = self.broker.store.find_queue(topic, 0)
        entry = cq.entry(queue_offset) if cq is not None else None
        data = self.broker.store.read_message(entry[0]) if entry is not None else None
        return decode_record(data, decompress=False) if data is not None else None

    def _half_at(self, queue_offset: int) -> MessageExt | None:
        return self._read_queue(TRANS_HALF_TOPIC, queue_offset)

    def _track(self, msg: MessageExt) -> None:
        times = msg.properties.get(Prop.TRANSACTION_CHECK_TIMES, "0")
        tid = transaction_id(msg)
        self.scan.half_stored(msg.queue_offset, tid)
        if tid not in self.decided:
            self.pending[tid] = HalfMessage(
                tid,
                msg.commit_log_offset,
                msg.queue_offset,
                msg.born_timestamp,
                int(times) if times.isdigit() else 0,
            )

    # --- half messages ---------------------------------------------------------------------------------

    def half_append(self, request: AppendRequest) -> AppendRequest:
        """Turn a prepared send into its half message: same record, stored under the half topic."""
        msg = decode_record(request.record, decompress=False)
        props = dict(msg.properties)
        props[Prop.REAL_TOPIC] = msg.topic
        props[Prop.REAL_QID] = str(msg.queue_id)
        # The unique key is the transaction id every check copy carries; a client that sent none gets one
        # here, or each copy would look like a new transaction and the first would stay open for good.
        props.setdefault(Prop.UNIQ_KEY, uuid.uuid4().hex.upper())
        return self._append_like(msg, TRANS_HALF_TOPIC, 0, props, SysFlag.TRANSACTION_NOT_TYPE)

    def put_half(self, request: AppendRequest) -> PutResult:
        """Store a half message (the store writes its offsets into the record) and track it."""
        result = self.broker.store.put([request])
        self._track(decode_record(request.record, decompress=False))
        return result

    def _append_like(
        self, msg: MessageExt, topic: str, queue_id: int, props: dict[str, str], transaction_type: int
    ) -> AppendRequest:
        return self.broker.make_append(
            topic=topic,
            queue_id=queue_id,
            body=msg.body,
            flag=msg.flag,
            properties=props,
            sys_flag=(msg.sys_flag & ~0xC) | transaction_type,
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host_raw,
            reconsume_times=msg.reconsume_times,
            schedule=topic not in (TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC),
        )

    def _op_append(self, half: MessageExt) -> AppendRequest:
        return self.broker.make_append(
            topic=TRANS_OP_HALF_TOPIC,
            queue_id=0,
            body=str(half.queue_offset).encode(),
            flag=0,
            properties={Prop.TAGS: TRANS_OP_TAG, Prop.WAIT: "false"},
            sys_flag=0,
            born_timestamp=int(time.time() * 1000),
            born_host=self.broker.store_host,
            schedule=False,
        )

    # --- decisions -------------------------------------------------------------------------------------

    def find_half(self, commit_log_offset: int) -> MessageExt:
        data = self.broker.store.read_message(commit_log_offset) if commit_log_offset >= 0 else None
        msg = decode_record(data, decompress=False) if data is not None else None
        if msg is None or msg.topic != TRANS_HALF_TOPIC:
            raise TransactionError(
                f"Find prepared transaction message failed: no half message at commit log offset "
                f"{commit_log_offset}"
            )
        return msg

    def end(self, half: MessageExt, commit: bool) -> PutResult:
        """Commit (store under the real topic) or roll back a half message, and log the decision in the
        same write. Raises TransactionError when the transaction was decided already."""
        tid = transaction_id(half)
        done = self.decided.get(tid)
        if done is None and tid not in self.pending and half.queue_offset < self.scan.half_position:
            done = Decision.DECIDED  # settled before the scan position: its op entry is no longer read
        if done is not None:
            raise TransactionError(f"the transaction {tid} is already {done.value}: nothing to do")
        requests = [self._op_append(half)]
        if commit:
            props = dict(half.properties)
            real_topic, real_qid = props.get(Prop.REAL_TOPIC), props.get(Prop.REAL_QID, "")
            if not real_topic or not real_qid.isdigit():
                raise TransactionError(f"the half message of {tid} has no REAL_TOPIC/REAL_QID")
            # Java stores the properties as the half message had them (its clearProperty calls come after
            # the text is built): TRAN_MSG, PGROUP, REAL_TOPIC and REAL_QID stay.
            requests.insert(0, self._committed_append(half, real_topic, int(real_qid), props))
        result = self.broker.store.put(requests)
        self.scan.op_stored(result.queue_offsets[-1], tid)
        self.pending.pop(tid, None)
        self.decided[tid] = Decision.COMMITTED if commit else Decision.ROLLED_BACK
        return result

    def _committed_append(
        self, half: MessageExt, topic: str, queue_id: int, props: dict[str, str]
    ) -> AppendRequest:
        """The committed message; a timer on the half message starts now, as Java's put hook runs the timer
        transform on a COMMIT-type message (never on the PREPARED half). Raises TransactionError for a
        timer the broker refuses, leaving the transaction open (Java answers the commit with an error)."""
        try:
            timer = self.broker.timers.plan(props, topic)
        except TimerRejected as exc:
            raise TransactionError(f"cannot commit {transaction_id(half)}: {exc}") from None
        if timer is None:
            return self._append_like(half, topic, queue_id, props, SysFlag.TRANSACTION_COMMIT)
        props[Prop.REAL_TOPIC], props[Prop.REAL_QID] = topic, str(queue_id)
        request = self._append_like(
            half, TIMER_TOPIC, TIMER_MESSAGES_QUEUE, props, SysFlag.TRANSACTION_COMMIT
        )
        request.tags_code = timer.due_ms
        return request

    # --- checks ----------------------------------------------------------------------------------------

    async def _check_loop(self) -> None:
        while True:
            await asyncio.sleep(self.broker.config.transaction_check_interval_s)
            try:
                self.check_once()
                await self.advance()
            except StoreError as exc:
                log.error("transactions: check pass failed: %s", exc)

    def check_once(self) -> None:
        """One pass over the undecided half messages old enough to be checked."""
        config = self.broker.config
        now = int(time.time() * 1000)
        for half in list(self.pending.values()):
            if now - half.born_timestamp < config.transaction_timeout_s * 1000:
                continue
            msg = self._read_at(half.commit_log_offset)
            if msg is None:
                log.warning("transactions: half message of %s is gone", half.transaction_id)
                self.pending.pop(half.transaction_id, None)
                continue
            if half.check_times >= config.transaction_check_max:
                log.warning(
                    "transactions: discarding %s after %d checks", half.transaction_id, half.check_times
                )
                discarded = self.broker.store.put([self._op_append(msg)])
                self.scan.op_stored(discarded.queue_offsets[0], half.transaction_id)
                self.pending.pop(half.transaction_id, None)
                self.decided[half.transaction_id] = Decision.DISCARDED
                self.discarded += 1
                continue
            self._check(msg, half.check_times + 1)

    def _read_at(self, commit_log_offset: int) -> MessageExt | None:
        data = self.broker.store.read_message(commit_log_offset)
        return decode_record(data, decompress=False) if data is not None else None

    def _check(self, msg: MessageExt, times: int) -> None:
        """Store the half message again with one check more, then ask a producer of its group about it."""
        props = dict(msg.properties)
        props[Prop.TRANSACTION_CHECK_TIMES] = str(times)
        request = self._append_like(msg, TRANS_HALF_TOPIC, 0, props, SysFlag.TRANSACTION_NOT_TYPE)
        result = self.broker.store.put([request])
        copy = decode_record(request.record, decompress=False)
        self._track(copy)
        group = props.get(Prop.PGROUP, "")
        conn = self._producer_connection(group)
        if conn is None and any(target(group, copy) for target in self.check_targets):
            self.checks_sent += 1
            return
        if conn is None:
            log.warning("transactions: no live producer of group %r to check %s", group, transaction_id(copy))
            return
        header = CheckTransactionStateRequestHeader(
            tran_state_table_offset=result.queue_offsets[0],
            commit_log_offset=result.commit_log_offsets[0],
            msg_id=props.get(Prop.UNIQ_KEY),
            transaction_id=props.get(Prop.UNIQ_KEY),
            offset_msg_id=offset_msg_id(self.broker.store_host, result.commit_log_offsets[0]),
        )
        real_qid = props.get(Prop.REAL_QID, "0")
        body = encode_record(
            topic=props.get(Prop.REAL_TOPIC, copy.topic),
            queue_id=int(real_qid) if real_qid.isdigit() else 0,
            body=copy.body,
            properties=encode_properties(props),
            flag=copy.flag,
            sys_flag=copy.sys_flag,
            born_timestamp=copy.born_timestamp,
            born_host=copy.born_host_raw,
            store_timestamp=copy.store_timestamp,
            store_host=copy.store_host_raw,
            reconsume_times=copy.reconsume_times,
            queue_offset=result.queue_offsets[0],
            commit_log_offset=result.commit_log_offsets[0],
        )
        conn.invoke_oneway(
            RemotingCommand(RequestCode.CHECK_TRANSACTION_STATE, ext_fields=header.to_ext(), body=bytes(body))
        )
        self.checks_sent += 1

    def _producer_connection(self, group: str) -> RemotingConnection | None:
        """A live connection of a producer of ``group``, picked at random (Java getAvailableChannel)."""
        live = [c for c in self.broker.clients.producers.get(group, {}) if not c.is_closed]
        return random.choice(live) if live else None
