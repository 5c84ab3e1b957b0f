"""END_TRANSACTION: a producer commits or rolls back a half message
(docs/protocols/rocketmq-messages.md#transactions; Java EndTransactionProcessor)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from tidemq.broker.processors import register_table
from tidemq.broker.processors.send import after_flush
from tidemq.broker.transactions import TransactionError
from tidemq.record import Prop, SysFlag
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.headers import EndTransactionRequestHeader
from tidemq.remoting.transport import RemotingConnection, RequestDispatcher
from tidemq.store import FlushMode, StoreError

if TYPE_CHECKING:
    from tidemq.broker.broker import Broker

log = logging.getLogger(__name__)


def register(dispatcher: RequestDispatcher, broker: Broker) -> None:
    register_table(dispatcher, broker, {RequestCode.END_TRANSACTION: end_transaction})


def end_transaction(
    broker: Broker, conn: RemotingConnection, req: RemotingCommand
) -> RemotingCommand | Awaitable[RemotingCommand] | None:
    h = EndTransactionRequestHeader.from_ext(req.ext_fields)
    decision = h.commit_or_rollback
    if decision not in (SysFlag.TRANSACTION_COMMIT, SysFlag.TRANSACTION_ROLLBACK):
        # Java answers nothing to an undecided (0) or unknown state: the check service asks again later.
        log.info(
            "producer %s left transaction %s undecided (state %d, from check: %s)",
            conn.address,
            h.transaction_id or h.msg_id,
            decision,
            h.from_transaction_check,
        )
        return None
    service = broker.transactions
    try:
        half = service.find_half(h.commit_log_offset)
    except TransactionError as exc:
        return req.error(ResponseCode.SYSTEM_ERROR, str(exc))
    # Java's checkPrepareMessage, with its remarks.
    if half.properties.get(Prop.PGROUP, "") != h.producer_group:
        return req.error(ResponseCode.SYSTEM_ERROR, "The producer group wrong")
    if half.queue_offset != h.tran_state_table_offset:
        return req.error(ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong")
    try:
        result = service.end(half, commit=decision == SysFlag.TRANSACTION_COMMIT)
    except TransactionError as exc:
        return req.error(ResponseCode.SYSTEM_ERROR, str(exc))
    except StoreError as exc:
        return req.error(ResponseCode.SERVICE_NOT_AVAILABLE, f"service not available now: {exc}")
    if broker.store.config.flush_mode is FlushMode.SYNC:
        return after_flush(broker, req.response(), result.end_offset)
    return req.response()
