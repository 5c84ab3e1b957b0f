"""The MessagingService RPCs: QueryRoute, Heartbeat, Telemetry, SendMessage, QueryAssignment,
NotifyClientTermination and EndTransaction (transactions are grpc/transactions.py's, the known clients and
their Telemetry streams grpc/clients.py's); the consumer RPCs (ReceiveMessage, AckMessage,
ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue) delegate to ``grpc.consumer``.

Each RPC answers gRPC OK with an ``apache.rocketmq.v2.Status`` inside, as Java's proxy does. See
docs/protocols/rocketmq-grpc.md.
"""

from __future__ import annotations

import gzip
import logging
import random
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import grpc
from google.protobuf.message import Message as ProtoMessage

from tidemq.broker.timers import MESSAGES_QUEUE, TimerRejected
from tidemq.broker.topic_attributes import message_type
from tidemq.broker.topics import NOT_SENDABLE, is_system_topic, name_problem
from tidemq.grpc.clients import GrpcClients, peer_of, telemetry_stream
from tidemq.grpc.consumer import ConsumerRpcs
from tidemq.grpc.convert import check_message, queue_for_group, stored_shape
from tidemq.grpc.message_types import accepted_types, check_type, unknown_topic_refusal
from tidemq.grpc.proto import definition_pb2 as pb
from tidemq.grpc.proto import service_pb2 as spb
from tidemq.grpc.proto import service_pb2_grpc as spb_grpc
from tidemq.grpc.routes import answer_endpoints, assignments, broker_of, route_queues
from tidemq.grpc.settings import GroupSettings, ServerSettings, merged_settings
from tidemq.grpc.status import Code, GrpcStatusError, error_status, ok, status
from tidemq.grpc.transactions import GrpcTransactions, send_halves
from tidemq.record import LOOPBACK_HOST, MessageDecodeError, Prop, pack_host
from tidemq.remoting.names import TIMER_TOPIC
from tidemq.store import FlushMode, StoreError
from tidemq.store.requests import AppendRequest

if TYPE_CHECKING:
    from tidemq.broker.broker import Broker
    from tidemq.broker.metadata import TopicConfig

log = logging.getLogger(__name__)

CLIENT_ID_KEY = "x-mq-client-id"
R = TypeVar("R", bound=ProtoMessage)


def client_id(context: grpc.aio.ServicerContext[object, object]) -> str:
    """The ``x-mq-client-id`` header every SDK call carries (CLIENT_ID_REQUIRED without it)."""
    for key, value in context.invocation_metadata() or ():
        if key == CLIENT_ID_KEY and isinstance(value, str) and value:
            return value
    raise GrpcStatusError(Code.CLIENT_ID_REQUIRED, "rpc metadata has no client id")


def born_host(peer: str) -> bytes:
    """The sender's address in stored layout from grpc's ``ipv4:1.2.3.4:5`` / ``ipv6:[::1]:5`` peer."""
    _, _, address = peer.partition(":")
    host, _, port = address.rpartition(":")
    try:
        packed, is_v6 = pack_host(host.strip("[]"), int(port))
    except ValueError:
        return LOOPBACK_HOST
    return LOOPBACK_HOST if is_v6 else packed  # the record's v4 layout; a v6 born host needs its sys flag


def check_topic(name: str) -> None:
    """GrpcValidator.validateTopic: ILLEGAL_TOPIC for a bad name or a system topic."""
    problem = name_problem(name)
    if problem:
        raise GrpcStatusError(Code.ILLEGAL_TOPIC, problem)
    if is_system_topic(name) or name in NOT_SENDABLE:
        raise GrpcStatusError(Code.ILLEGAL_TOPIC, "cannot access system topic")


def check_group(name: str) -> None:
    problem = name_problem(name, "group")
    if problem:
        raise GrpcStatusError(Code.ILLEGAL_CONSUMER_GROUP, problem)


class MessagingService(spb_grpc.MessagingServiceServicer):
    """The RPCs over one broker; ``port`` is this listener's, answered in routes."""

    def __init__(self, broker: Broker, host: str, port: int = 0) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self.server_settings = ServerSettings(max_message_size=broker.config.max_message_size)
        #: Each client's last Telemetry settings, by client id (what Heartbeat reads its type from).
        self.client_settings: dict[str, pb.Settings] = {}
        self.clients = GrpcClients(broker)
        self.transactions = GrpcTransactions(broker, self.clients)
        self.consumer = ConsumerRpcs(
            broker, broker.pop, lambda group, _cid: self._group_settings(group).fifo, self._max_attempts
        )

    # --- helpers ----------------------------------------------------------------------------------------

    async def _answer(
        self, name: str, make: Callable[[pb.Status], R], run: Callable[[], Awaitable[R] | R]
    ) -> R:
        """Run a handler; a refusal or a failure becomes the response's status (and a log line)."""
        try:
            result = run()
            return await result if isinstance(result, Awaitable) else result
        except GrpcStatusError as exc:
            log.info("%s refused: %s %s", name, pb.Code.Name(exc.code), exc.message)
            return make(error_status(exc))
        except Exception as exc:
            log.exception("%s failed", name)
            return make(status(Code.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}"))

    def _topic(self, name: str) -> TopicConfig:
        check_topic(name)
        config = self.broker.topics.get(name)
        if config is None:
            raise GrpcStatusError(Code.TOPIC_NOT_FOUND, f"topic {name} not exist")
        return config

    def _broker(self, requested: pb.Endpoints) -> pb.Broker:
        endpoints = answer_endpoints(requested, self.host, self.port)
        return broker_of(self.broker.config.broker_name, endpoints)

    def _group_settings(self, group: str) -> GroupSettings:
        config = self.broker.groups.get(group)
        if config is None:
            return GroupSettings()
        return GroupSettings(fifo=config.consume_message_orderly, retry_max_times=config.retry_max_times)

    def _max_attempts(self, group: str) -> int:
        """The group's retry policy's max attempts, as the settings answer tells its consumers."""
        return self._group_settings(group).retry_max_times + 1

    # --- route and assignment -----------------------------------------------------------------------------

    async def QueryRoute(
        self, request: spb.QueryRouteRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> spb.QueryRouteResponse:
        def run() -> spb.QueryRouteResponse:
            client_id(context)
            config = self._topic(request.topic.name)
            queues = route_queues(
                request.topic,
                config.perm,
                config.read_queue_nums,
                config.write_queue_nums,
                self._broker(request.endpoints),
                accepted_types(message_type(config.attributes)),
            )
            return spb.QueryRouteResponse(status=ok(), message_queues=queues)

        return await self._answer("QueryRoute", lambda s: spb.QueryRouteResponse(status=s), run)

    async def QueryAssignment(
        self, request: spb.QueryAssignmentRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> spb.QueryAssignmentResponse:
        def run() -> spb.QueryAssignmentResponse:
            client_id(context)
            check_topic(request.topic.name)
            check_group(request.group.name)
            config = self._topic(request.topic.name)
            found = assignments(
                request.topic,
                config.perm,
                config.read_queue_nums,
                self._broker(request.endpoints),
                self._group_settings(request.group.name).fifo,
            )
            if not found:
                return spb.QueryAssignmentResponse(status=status(Code.FORBIDDEN, "no readable queue"))
            return spb.QueryAssignmentResponse(status=ok(), assignments=found)

        return await self._answer("QueryAssignment", lambda s: spb.QueryAssignmentResponse(status=s), run)

    # --- client lifecycle ---------------------------------------------------------------------------------

    async def Heartbeat(
        self, request: spb.HeartbeatRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> spb.HeartbeatResponse:
        def run() -> spb.HeartbeatResponse:
            settings = self.client_settings.get(client_id(context))
            if settings is None:
                return spb.HeartbeatResponse(
                    status=status(
                        Code.UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client"
                    )
                )
            kind = settings.client_type
            if kind == pb.PRODUCER:
                return spb.HeartbeatResponse(status=ok())
            if kind in (pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER):
                check_group(request.group.name)
                return spb.HeartbeatResponse(status=ok())
            return spb.HeartbeatResponse(
                status=status(Code.UNRECOGNIZED_CLIENT_TYPE, pb.ClientType.Name(kind))
            )

        return await self._answer("Heartbeat", lambda s: spb.HeartbeatResponse(status=s), run)

    async def NotifyClientTermination(
        self, request: spb.NotifyClientTerminationRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> spb.NotifyClientTerminationResponse:
        async def run() -> spb.NotifyClientTerminationResponse:
            cid = client_id(context)
            self.client_settings.pop(cid, None)
            self.clients.drop(cid)
            await self.consumer.client_gone(cid)
            return spb.NotifyClientTerminationResponse(status=ok())

        return await self._answer(
            "NotifyClientTermination", lambda s: spb.NotifyClientTerminationResponse(status=s), run
        )

    def settings_answer(self, cid: str, command: pb.Settings) -> spb.TelemetryCommand:
        """Record a client's settings and answer them with the server's (ClientActivity)."""
        try:
            if command.client_type == pb.CLIENT_TYPE_UNSPECIFIED:
                raise GrpcStatusError(Code.UNRECOGNIZED_CLIENT_TYPE, "client type is not specified")
            group = None
            if command.HasField("subscription"):
                check_group(command.subscription.group.name)
                for entry in command.subscription.subscriptions:
                    check_topic(entry.topic.name)
                group = self._group_settings(command.subscription.group.name)
            elif command.HasField("publishing"):
                for topic in command.publishing.topics:
                    check_topic(topic.name)
        except GrpcStatusError as exc:
            log.info("Telemetry settings of %s refused: %s", cid, exc.message)
            return spb.TelemetryCommand(status=error_status(exc))
        self.client_settings[cid] = command
        self.clients.settings(cid, command)
        merged = merged_settings(command, self.server_settings, group)
        return spb.TelemetryCommand(status=ok(), settings=merged)

    async def Telemetry(
        self,
        request_iterator: AsyncIterator[spb.TelemetryCommand],
        context: grpc.aio.ServicerContext[object, object],
    ) -> AsyncIterator[spb.TelemetryCommand]:
        try:
            cid = client_id(context)
        except GrpcStatusError as exc:
            yield spb.TelemetryCommand(status=error_status(exc))
            return
        self.clients.identify(cid, peer_of(context))

        # Thread stack traces and verify-message results answer server commands tidemq never sends.
        def answer(command: spb.TelemetryCommand) -> spb.TelemetryCommand | None:
            return self.settings_answer(cid, command.settings) if command.HasField("settings") else None

        async for command in telemetry_stream(self.clients, cid, request_iterator, answer):
            yield command

    # --- sending ------------------------------------------------------------------------------------------

    async def SendMessage(
        self, request: spb.SendMessageRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> spb.SendMessageResponse:
        return await self._answer(
            "SendMessage",
            lambda s: spb.SendMessageResponse(status=s),
            lambda: self._send(request, context),
        )

    async def _send(
        self, request: spb.SendMessageRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> spb.SendMessageResponse:
        client_id(context)
        if not request.messages:
            raise GrpcStatusError(Code.MESSAGE_CORRUPTED, "no message to send")
        topic_res = request.messages[0].topic
        if any(m.topic != topic_res for m in request.messages):
            raise GrpcStatusError(Code.MESSAGE_CORRUPTED, "topic in message is not same")
        check_topic(topic_res.name)
        for msg in request.messages:
            check_message(msg, self.server_settings.max_message_size)
        found = self.broker.topics.get(topic_res.name)
        if found is None:
            raise unknown_topic_refusal(request.messages[0])
        config = found
        topic_type = message_type(config.attributes)
        for msg in request.messages:
            check_type(topic_type, msg)
        if not self.broker.config.writable or not config.writable:
            raise GrpcStatusError(Code.FORBIDDEN, f"the topic[{topic_res.name}] sending message is forbidden")
        transactional = request.messages[0].system_properties.message_type == pb.TRANSACTION
        for msg in request.messages:
            sp = msg.system_properties
            if (sp.message_type == pb.TRANSACTION) != transactional:
                raise GrpcStatusError(Code.MESSAGE_CORRUPTED, "transaction and other messages in one send")
            if transactional and sp.HasField("delivery_timestamp"):
                raise GrpcStatusError(
                    Code.ILLEGAL_DELIVERY_TIME, "a transaction message cannot have a delivery time"
                )
        first_group = request.messages[0].system_properties.message_group
        if len(request.messages) == 1 and first_group:
            queue_id = queue_for_group(first_group, config.write_queue_nums)
        else:
            queue_id = random.randrange(config.write_queue_nums)
        host = born_host(context.peer() or "")
        appends = [self._append(msg, topic_res.name, queue_id, host) for msg in request.messages]
        if transactional:
            return await send_halves(self.transactions, list(request.messages), appends)
        try:
            result = self.broker.store.put(appends)
        except StoreError as exc:
            raise GrpcStatusError(Code.INTERNAL_SERVER_ERROR, f"service not available now: {exc}") from None
        self.broker.stats["put"] += len(result.commit_log_offsets)
        entry_status = ok()
        if self.broker.store.config.flush_mode is FlushMode.SYNC:
            try:
                await self.broker.store.wait_durable(result.end_offset)
            except StoreError:
                entry_status = status(
                    Code.MASTER_PERSISTENCE_TIMEOUT, "send message failed, sendStatus=FLUSH_DISK_TIMEOUT"
                )
        entries = [
            spb.SendResultEntry(
                status=entry_status, message_id=msg.system_properties.message_id, offset=offset
            )
            if entry_status.code == Code.OK
            else spb.SendResultEntry(status=entry_status)
            for msg, offset in zip(request.messages, result.queue_offsets, strict=True)
        ]
        return spb.SendMessageResponse(
            status=status(entry_status.code, entry_status.message), entries=entries
        )

    def _append(self, msg: pb.Message, topic: str, queue_id: int, host: bytes) -> AppendRequest:
        """One message as a stored record; a future delivery time goes through the broker's timer."""
        shape = stored_shape(msg, topic)
        props = shape.properties
        try:
            timer = self.broker.timers.plan(props, topic)
        except TimerRejected as exc:
            raise GrpcStatusError(Code.ILLEGAL_DELIVERY_TIME, str(exc)) from None
        stored_topic, stored_qid = topic, queue_id
        if timer is not None:
            props[Prop.REAL_TOPIC], props[Prop.REAL_QID] = topic, str(queue_id)
            stored_topic, stored_qid = TIMER_TOPIC, MESSAGES_QUEUE
        body = bytes(msg.body)
        if msg.system_properties.body_encoding == pb.GZIP:
            # Stored plain: a remoting consumer inflates a COMPRESSED body as zlib, not gzip.
            try:
                body = gzip.decompress(body)
            except (OSError, EOFError, zlib.error) as exc:
                raise GrpcStatusError(Code.MESSAGE_CORRUPTED, f"body is not gzip: {exc}") from None
        try:
            request = self.broker.make_append(
                topic=stored_topic,
                queue_id=stored_qid,
                body=body,
                flag=0,
                properties=props,
                sys_flag=0,
                born_timestamp=shape.born_timestamp,
                born_host=host,
                reconsume_times=msg.system_properties.delivery_attempt,
            )
        except MessageDecodeError as exc:
            raise GrpcStatusError(Code.MESSAGE_CORRUPTED, str(exc)) from None
        if timer is not None:
            request.tags_code = timer.due_ms
        return request

    async def EndTransaction(
        self, request: spb.EndTransactionRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> spb.EndTransactionResponse:
        def run() -> spb.EndTransactionResponse:
            client_id(context)
            self._topic(request.topic.name)
            return self.transactions.end(request)

        return await self._answer("EndTransaction", lambda s: spb.EndTransactionResponse(status=s), run)

    # --- consuming (grpc/consumer.py) ---------------------------------------------------------------------

    async def ReceiveMessage(
        self, request: spb.ReceiveMessageRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        try:
            cid = client_id(context)
            check_topic(request.message_queue.topic.name)
            check_group(request.group.name)
        except GrpcStatusError as exc:
            yield spb.ReceiveMessageResponse(status=error_status(exc))
            return
        remaining = context.time_remaining()
        remaining_ms = None if remaining is None else int(remaining * 1000)
        async for response in self.consumer.receive(request, cid, remaining_ms):
            yield response

    async def AckMessage(
        self, request: spb.AckMessageRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> spb.AckMessageResponse:
        async def run() -> spb.AckMessageResponse:
            client_id(context)
            check_topic(request.topic.name)
            check_group(request.group.name)
            return await self.consumer.ack(request)

        return await self._answer("AckMessage", lambda s: spb.AckMessageResponse(status=s), run)

    async def ChangeInvisibleDuration(
        self, request: spb.ChangeInvisibleDurationRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> spb.ChangeInvisibleDurationResponse:
        async def run() -> spb.ChangeInvisibleDurationResponse:
            client_id(context)
            check_topic(request.topic.name)
            check_group(request.group.name)
            return await self.consumer.change_invisible(request)

        return await self._answer(
            "ChangeInvisibleDuration", lambda s: spb.ChangeInvisibleDurationResponse(status=s), run
        )

    async def ForwardMessageToDeadLetterQueue(
        self,
        request: spb.ForwardMessageToDeadLetterQueueRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        async def run() -> spb.ForwardMessageToDeadLetterQueueResponse:
            client_id(context)
            check_topic(request.topic.name)
            check_group(request.group.name)
            return await self.consumer.forward_to_dlq(request)

        return await self._answer(
            "ForwardMessageToDeadLetterQueue",
            lambda s: spb.ForwardMessageToDeadLetterQueueResponse(status=s),
            run,
        )
