"""The transaction producer (Java TransactionMQProducer; docs/protocols/rocketmq-messages.md#transactions).

``send_in_transaction`` sends a half message, which no consumer sees, runs the local transaction and
tells the broker the outcome; a broker that got no outcome (an UNKNOW answer, a lost oneway, a crashed
producer) later asks any producer of the group through CHECK_TRANSACTION_STATE, answered by ``checker``.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from tidemq.client import api
from tidemq.client.instance import MQClientError
from tidemq.client.message import Message, SendResult, SendStatus
from tidemq.client.producer import Producer
from tidemq.record import MessageDecodeError, MessageExt, Prop, SysFlag, decode_offset_msg_id
from tidemq.remoting.codes import RequestCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from tidemq.remoting.transport import RemotingConnection, RemotingError

log = logging.getLogger(__name__)


class LocalTransactionState(enum.Enum):
    """The local transaction's outcome, spelled as Java's (UNKNOW included)."""

    COMMIT_MESSAGE = SysFlag.TRANSACTION_COMMIT
    ROLLBACK_MESSAGE = SysFlag.TRANSACTION_ROLLBACK
    UNKNOW = SysFlag.TRANSACTION_NOT_TYPE


@dataclass(slots=True)
class TransactionSendResult(SendResult):
    transaction_id: str = ""
    local_transaction_state: LocalTransactionState = LocalTransactionState.UNKNOW


_StateResult = LocalTransactionState | Awaitable[LocalTransactionState]
Executor = Callable[[Message, Any], _StateResult]
Checker = Callable[[MessageExt], _StateResult]


async def _state_of(result: _StateResult) -> LocalTransactionState:
    state = await result if inspect.isawaitable(result) else result
    if not isinstance(state, LocalTransactionState):
        raise MQClientError(f"a transaction callback must return a LocalTransactionState, got {state!r}")
    return state


class TransactionProducer(Producer):
    def __init__(
        self,
        group: str,
        namesrv_addr: str,
        executor: Executor,
        checker: Checker,
        **kwargs: Any,
    ) -> None:
        """``executor(msg, arg)`` runs the local transaction; ``checker(msg_ext)`` tells its outcome when
        the broker asks. Either may be a plain or an async function returning a LocalTransactionState."""
        super().__init__(group, namesrv_addr, **kwargs)
        self.executor = executor
        self.checker = checker
        self._checks: set[asyncio.Task[None]] = set()
        self._registered: set[str] = set()

    def _prepare(
        self, msg: Message, deliver_at: datetime | int | None = None, delay: timedelta | None = None
    ) -> tuple[str, bytes, dict[str, str], int]:
        topic, body, props, sys_flag = super()._prepare(msg, deliver_at, delay)
        if props.get(Prop.TRAN_MSG) == "true":
            sys_flag |= SysFlag.TRANSACTION_PREPARED
        return topic, body, props, sys_flag

    async def send_in_transaction(self, msg: Message, arg: Any = None) -> TransactionSendResult:
        """Send ``msg`` as a half message, run the local transaction, report its outcome (oneway, as Java)."""
        props = dict(msg.properties)
        props[Prop.TRAN_MSG] = "true"
        props[Prop.PGROUP] = self.group
        half = replace(msg, properties=props, delay_level=0)  # Java drops a delay level here too
        result = await self.send(half)
        await self._register_with(result.message_queue.broker_name)
        state = LocalTransactionState.ROLLBACK_MESSAGE
        error: BaseException | None = None
        if result.status is SendStatus.SEND_OK:
            try:
                state = await _state_of(self.executor(msg, arg))
            except Exception as exc:
                log.warning("local transaction of %s failed: %s", result.msg_id, exc)
                state, error = LocalTransactionState.UNKNOW, exc
        await self._end(result, state, error)
        return TransactionSendResult(
            result.status,
            result.msg_id,
            result.offset_msg_id,
            result.message_queue,
            result.queue_offset,
            transaction_id=result.msg_id,
            local_transaction_state=state,
        )

    async def _register_with(self, broker_name: str) -> None:
        """Heartbeat a broker the first time a half message goes to it: it checks a transaction only with
        a producer its heartbeats registered, and the periodic heartbeat may be 30 s away."""
        if broker_name in self._registered:
            return
        conn = await self.instance.broker_connection(broker_name)
        try:
            await api.heartbeat(conn, self.instance.heartbeat_body(), self.config.call_timeout_s)
        except (RemotingError, api.BrokerError) as exc:
            log.warning("heartbeat to %s failed: %s", broker_name, exc)
            return
        self._registered.add(broker_name)

    async def _end(
        self, result: SendResult, state: LocalTransactionState, error: BaseException | None
    ) -> None:
        try:
            _addr, offset = decode_offset_msg_id(result.offset_msg_id or result.msg_id)
        except MessageDecodeError as exc:
            log.warning("cannot end transaction %s: %s", result.msg_id, exc)
            return
        header = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=result.queue_offset,
            commit_log_offset=offset,
            commit_or_rollback=state.value,
            msg_id=result.msg_id,
            from_transaction_check=False,
            transaction_id=result.msg_id,
        )
        remark = f"executeLocalTransactionBranch exception: {error}" if error else None
        conn = await self.instance.broker_connection(result.message_queue.broker_name)
        conn.invoke_oneway(
            RemotingCommand(RequestCode.END_TRANSACTION, ext_fields=header.to_ext(), remark=remark)
        )

    def check_transaction_state(self, conn: RemotingConnection, msg: MessageExt, ext: dict[str, str]) -> None:
        """Answer a broker's CHECK_TRANSACTION_STATE in the background (the request is oneway)."""
        task = asyncio.ensure_future(self._answer_check(conn, msg, ext))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    async def _answer_check(self, conn: RemotingConnection, msg: MessageExt, ext: dict[str, str]) -> None:
        h = CheckTransactionStateRequestHeader.from_ext(ext)
        error: BaseException | None = None
        try:
            state = await _state_of(self.checker(msg))
        except Exception as exc:
            log.warning("transaction check of %s failed: %s", h.transaction_id, exc)
            state, error = LocalTransactionState.UNKNOW, exc
        header = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=h.tran_state_table_offset,
            commit_log_offset=h.commit_log_offset,
            commit_or_rollback=state.value,
            msg_id=msg.properties.get(Prop.UNIQ_KEY) or h.msg_id or "",
            from_transaction_check=True,
            transaction_id=h.transaction_id,
        )
        remark = f"checkLocalTransactionState Exception: {error}" if error else None
        if not conn.is_closed:
            conn.invoke_oneway(
                RemotingCommand(RequestCode.END_TRANSACTION, ext_fields=header.to_ext(), remark=remark)
            )

    async def shutdown(self) -> None:
        if self._checks:
            await asyncio.gather(*self._checks, return_exceptions=True)
        await super().shutdown()
