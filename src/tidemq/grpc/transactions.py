"""Transaction messages over gRPC (Java proxy SendMessageActivity's transaction part, EndTransactionActivity,
TransactionProcessor and ClientActivity's orphaned transaction recovery).

A TRANSACTION send is stored as a half message by the broker's transaction service, with the topic as its
producer group (a 5.x SDK has none; the proxy uses the topic). The transaction id handed back is the half
message's offset message id, but a decision is found by the message id (the producer's unique key, the
same on every stored copy), so an EndTransaction still lands after a check re-stored the half message or
the server restarted. When the service's check falls due and no remoting producer of the group is
connected, the check goes down a gRPC producer's Telemetry stream as RecoverOrphanedTransactionCommand,
and its answer comes back as an EndTransaction with source SERVER_CHECK.
"""

from __future__ import annotations

import logging
import zlib
from typing import TYPE_CHECKING

from google.protobuf.timestamp_pb2 import Timestamp

from tidemq.broker.transactions import TransactionError
from tidemq.grpc.clients import GrpcClients
from tidemq.grpc.convert import KEY_SEPARATOR, RESERVED_PROPERTIES
from tidemq.grpc.proto import definition_pb2 as pb
from tidemq.grpc.proto import service_pb2 as spb
from tidemq.grpc.status import Code, GrpcStatusError, ok, status
from tidemq.record import MessageExt, Prop, offset_msg_id
from tidemq.store import FlushMode, StoreError
from tidemq.store.requests import AppendRequest

if TYPE_CHECKING:
    from tidemq.broker.broker import Broker

log = logging.getLogger(__name__)


def _timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def check_message(half: MessageExt, transaction_id: str) -> pb.Message:
    """A stored half message as the SDK's checker sees it: under its real topic, its own message id."""
    props = half.properties
    real_qid = props.get(Prop.REAL_QID, "0")
    system = pb.SystemProperties(
        keys=(props.get(Prop.KEYS) or "").split(KEY_SEPARATOR) if props.get(Prop.KEYS) else [],
        message_id=props.get(Prop.UNIQ_KEY, transaction_id),
        body_digest=pb.Digest(type=pb.CRC32, checksum=f"{zlib.crc32(half.body) & 0xFFFFFFFF:08X}"),
        body_encoding=pb.IDENTITY,
        message_type=pb.TRANSACTION,
        born_timestamp=_timestamp(half.born_timestamp),
        born_host=half.born_host.rpartition(":")[0],
        store_timestamp=_timestamp(half.store_timestamp),
        store_host=half.store_host,
        queue_id=int(real_qid) if real_qid.isdigit() else 0,
        delivery_attempt=half.reconsume_times + 1,
    )
    if props.get(Prop.TAGS):
        system.tag = props[Prop.TAGS]
    user = {k: v for k, v in props.items() if k not in RESERVED_PROPERTIES}
    return pb.Message(
        topic=pb.Resource(name=props.get(Prop.REAL_TOPIC, half.topic)),
        user_properties=user,
        system_properties=system,
        body=bytes(half.body),
    )


class GrpcTransactions:
    """Half messages in, decisions in, checks out through the clients' Telemetry streams."""

    def __init__(self, broker: Broker, clients: GrpcClients) -> None:
        self.broker = broker
        self.clients = clients
        broker.transactions.check_targets.append(self.ask_producer)

    def store_half(self, request: AppendRequest) -> tuple[int, str, int]:
        """Store one prepared send as a half message: (queue offset, transaction id, end of the write)."""
        service = self.broker.transactions
        try:
            result = service.put_half(service.half_append(request))
        except StoreError as exc:
            raise GrpcStatusError(Code.INTERNAL_SERVER_ERROR, f"service not available now: {exc}") from None
        offset = result.commit_log_offsets[0]
        return result.queue_offsets[0], offset_msg_id(self.broker.store_host, offset), result.end_offset

    def ask_producer(self, group: str, half: MessageExt) -> bool:
        """The transaction service's check target: push the check to a producer of ``group``."""
        tid = offset_msg_id(self.broker.store_host, half.commit_log_offset)
        command = spb.TelemetryCommand(
            status=ok(),
            recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                message=check_message(half, tid), transaction_id=tid
            ),
        )
        client = self.clients.push_to_producer(group, command)
        if client is not None:
            log.info("transactions: asked grpc producer %s of %r about %s", client, group, tid)
        return client is not None

    def end(self, request: spb.EndTransactionRequest) -> spb.EndTransactionResponse:
        """Commit or roll back the half message named by the request's message id."""
        if not request.transaction_id.strip():
            raise GrpcStatusError(Code.INVALID_TRANSACTION_ID, "transaction id cannot be empty")
        service = self.broker.transactions
        key = request.message_id
        done = service.decided.get(key)
        if done is not None:
            raise GrpcStatusError(
                Code.INVALID_TRANSACTION_ID,
                f"cannot found transaction data: transaction {key} is already {done.value}",
            )
        half = service.pending.get(key)
        if half is None:
            raise GrpcStatusError(
                Code.INVALID_TRANSACTION_ID, f"cannot found transaction data for message {key!r}"
            )
        if request.resolution not in (pb.COMMIT, pb.ROLLBACK):
            # UNKNOWN leaves it to the next check, as the broker ignores a TRANSACTION_NOT_TYPE end.
            return spb.EndTransactionResponse(status=ok())
        try:
            msg = service.find_half(half.commit_log_offset)
            real_topic = msg.properties.get(Prop.REAL_TOPIC)
            if real_topic != request.topic.name:
                raise GrpcStatusError(
                    Code.INVALID_TRANSACTION_ID,
                    f"transaction {key} belongs to topic {real_topic}, not {request.topic.name}",
                )
            service.end(msg, request.resolution == pb.COMMIT)
        except TransactionError as exc:
            raise GrpcStatusError(Code.INVALID_TRANSACTION_ID, str(exc)) from None
        except StoreError as exc:
            raise GrpcStatusError(Code.INTERNAL_SERVER_ERROR, f"service not available now: {exc}") from None
        log.info(
            "transactions: %s %s (%s)",
            key,
            "committed" if request.resolution == pb.COMMIT else "rolled back",
            pb.TransactionSource.Name(request.source),
        )
        return spb.EndTransactionResponse(status=status(Code.OK))


async def send_halves(
    transactions: GrpcTransactions, messages: list[pb.Message], appends: list[AppendRequest]
) -> spb.SendMessageResponse:
    """SendMessage's answer for TRANSACTION messages: each stored as a half message, with its
    transaction id; a SYNC store waits until they are durable, as a normal send does."""
    broker = transactions.broker
    entries = []
    end = 0
    for msg, append in zip(messages, appends, strict=True):
        queue_offset, tid, written = transactions.store_half(append)
        end = max(end, written)
        entries.append(
            spb.SendResultEntry(
                status=ok(),
                message_id=msg.system_properties.message_id,
                transaction_id=tid,
                offset=queue_offset,
            )
        )
    broker.stats["put"] += len(entries)
    if broker.store.config.flush_mode is FlushMode.SYNC:
        try:
            await broker.store.wait_durable(end)
        except StoreError:
            failed = status(
                Code.MASTER_PERSISTENCE_TIMEOUT, "send message failed, sendStatus=FLUSH_DISK_TIMEOUT"
            )
            return spb.SendMessageResponse(
                status=failed, entries=[spb.SendResultEntry(status=failed)] * len(entries)
            )
    return spb.SendMessageResponse(status=ok(), entries=entries)
