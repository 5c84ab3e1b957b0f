"""The MessagingService RPCs of the consumer side over the broker's pop state (store/pop.py): ReceiveMessage,
AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue (Java proxy ReceiveMessageActivity,
ReceiveMessageResponseStreamWriter, AckMessageActivity, ChangeInvisibleDurationActivity,
ForwardMessageToDLQActivity, and the broker's PopMessageProcessor for filtering and long polling).

A receive stream is the proxy's: a status, the messages, then a ``delivery_timestamp``, then the end; an
empty long poll answers MESSAGE_NOT_FOUND "no new message". A message whose delivery attempt passes the
group's max attempts goes to ``%DLQ%<group>`` and is acked instead of delivered. See
docs/protocols/rocketmq-grpc.md#consuming.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from tidemq.grpc.outgoing import Delivery, ReceiveFilter, receive_filter, to_grpc_message
from tidemq.grpc.proto import definition_pb2 as pb
from tidemq.grpc.proto import service_pb2 as spb
from tidemq.grpc.renewal import RENEW_SLICE_MS, HandleRenewal
from tidemq.grpc.routes import PERM_READ, PERM_WRITE
from tidemq.grpc.status import Code, GrpcStatusError, error_status, ok, status
from tidemq.record import Prop, decode_properties, decode_record, record_properties
from tidemq.record.message import MessageExt
from tidemq.remoting.names import dlq_topic
from tidemq.store import StoreError
from tidemq.store.pop import AckStatus, InvalidReceiptHandle, PopStore
from tidemq.store.pop_handle import ReceiptHandle

if TYPE_CHECKING:
    from tidemq.broker.broker import Broker

log = logging.getLogger(__name__)

#: ProxyConfig defaults: the long-polling bounds, receive's invisible-time bounds.
MIN_LONG_POLLING_MS = 5_000
MAX_LONG_POLLING_MS = 20_000
MIN_INVISIBLE_MS = 10_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000
#: PopMessageProcessor: a pop takes at most 32 messages.
MAX_BATCH = 32
#: How soon the messages of a receive stream cut before they were written become visible again
#: (the proxy's NACK_INVISIBLE_TIME of ReceiveMessageResponseStreamWriter).
GIVE_BACK_MS = 1_000


def now_ms() -> int:
    return int(time.time() * 1000)


def millis(seconds: int, nanos: int) -> int:
    return seconds * 1000 + nanos // 1_000_000


def polling_ms(requested_ms: int | None, remaining_ms: int | None) -> int:
    """The proxy's long-polling time: the request's (else the deadline's), clamped to [5 s, 20 s], then
    cut to the call's deadline; ILLEGAL_POLLING_TIME when the deadline leaves less than the minimum."""
    wanted = requested_ms if requested_ms is not None else (remaining_ms or MAX_LONG_POLLING_MS) // 2
    wanted = min(max(wanted, MIN_LONG_POLLING_MS), MAX_LONG_POLLING_MS)
    if remaining_ms is not None and wanted > remaining_ms:
        if remaining_ms < MIN_LONG_POLLING_MS:
            raise GrpcStatusError(
                Code.ILLEGAL_POLLING_TIME,
                "The deadline time remaining is not enough for polling, please check network condition",
            )
        wanted = remaining_ms
    return wanted


def receive_queues(read_queue_nums: int, start: int) -> list[int]:
    """Every readable queue of the topic, starting at ``start`` (mod the count), whatever queue the
    request names: the 5.x proxy's ReceiveMessageQueueSelector keeps only the request's broker and pops
    its broker-acting queue (id -1), which the broker's PopMessageProcessor serves from all its queues in
    turn. A receive bound to the one queue the SDK happened to pick would long-poll an empty queue while
    messages wait in the others (and unacked ones come back before the rest are seen)."""
    return [(start + i) % read_queue_nums for i in range(read_queue_nums)]


def check_invisible(ms: int, minimum: int) -> None:
    if ms < minimum:
        raise GrpcStatusError(
            Code.ILLEGAL_INVISIBLE_TIME, f"the invisibleTime is too small. min is {minimum}"
        )
    if ms > MAX_INVISIBLE_MS:
        raise GrpcStatusError(
            Code.ILLEGAL_INVISIBLE_TIME, f"the invisibleTime is too large. max is {MAX_INVISIBLE_MS}"
        )


def ack_status(result: AckStatus, what: str, *, stale_ok: bool = True) -> pb.Status:
    """The proxy's answer for a pop-state outcome (docs/store.md#pop-state).

    An ack (or a forward to the DLQ, which acks) with a handle that is stale but not expired is OK: the
    5.x broker's AckMessageProcessor writes an ack for any offset inside the queue and answers SUCCESS,
    whichever checkpoint it names, so a superseded handle (the message's invisible time was changed since)
    and an already acked one both get OK; the message itself stays in flight under its newer handle and
    comes back unless that one is acked. Change-invisible passes ``stale_ok=False``: a stale handle must
    not lease the message a second time beside its newer lease, so it is refused."""
    if result is AckStatus.OK or (stale_ok and result in STALE_OK):
        return ok()
    if result is AckStatus.EXPIRED:
        return status(Code.INVALID_RECEIPT_HANDLE, "receipt handle is expired")
    return status(Code.INTERNAL_SERVER_ERROR, f"{what} failed: status is abnormal")


#: Ack outcomes the proxy answers OK although they ack nothing (see ``ack_status``).
STALE_OK = frozenset({AckStatus.SUPERSEDED, AckStatus.ALREADY_ACKED})


class Arrivals:
    """Wakes long-polling receives when a message is dispatched to their topic (the broker's
    PopLongPollingService, per topic: a receive may take from any queue of it)."""

    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}

    def notify(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        for fut in self._waiters.pop(topic, ()):
            if not fut.done():
                fut.set_result(None)

    async def wait(self, topic: str, timeout_s: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(topic, set()).add(fut)
        try:
            await asyncio.wait([fut], timeout=timeout_s)
        finally:
            waiting = self._waiters.get(topic)
            if waiting is not None:
                waiting.discard(fut)
                if not waiting:
                    del self._waiters[topic]


class ConsumerRpcs:
    """Receive, ack, change-invisible and forward-to-DLQ over one broker's pop state.

    ``group_fifo(group, client_id)`` and ``max_attempts(group)`` come from the service: whether a group
    consumes in FIFO order, and its retry policy's max attempts.
    """

    def __init__(
        self,
        broker: Broker,
        pop: PopStore,
        group_fifo: Callable[[str, str], bool],
        max_attempts: Callable[[str], int],
    ) -> None:
        self.broker = broker
        self.pop = pop
        self.group_fifo = group_fifo
        self.max_attempts = max_attempts
        self.arrivals = Arrivals()
        #: Handles of auto-renew receives (a PushConsumer's), kept alive until acked.
        self.renewal = HandleRenewal(pop)
        broker.store.dispatch_listeners.append(self.arrivals.notify)
        self._round_robin: dict[tuple[str, str], itertools.count[int]] = {}
        self._giving_back: set[asyncio.Task[None]] = set()

    # --- receive ----------------------------------------------------------------------------------------

    async def receive(
        self, request: spb.ReceiveMessageRequest, cid: str, remaining_ms: int | None
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        """The response stream: a status, the messages, the delivery timestamp (always, as the proxy's
        onComplete writes it)."""
        try:
            async for response in self._receive(request, cid, remaining_ms):
                yield response
        except GrpcStatusError as exc:
            log.info("ReceiveMessage refused: %s %s", pb.Code.Name(exc.code), exc.message)
            yield spb.ReceiveMessageResponse(status=error_status(exc))
        except Exception as exc:
            log.exception("ReceiveMessage failed")
            yield spb.ReceiveMessageResponse(
                status=status(Code.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")
            )
        stamp = spb.ReceiveMessageResponse()
        stamp.delivery_timestamp.FromMilliseconds(now_ms())
        yield stamp

    async def _receive(
        self, request: spb.ReceiveMessageRequest, cid: str, remaining_ms: int | None
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        requested = (
            millis(request.long_polling_timeout.seconds, request.long_polling_timeout.nanos)
            if request.HasField("long_polling_timeout")
            else None
        )
        poll_ms = polling_ms(requested, remaining_ms)
        topic = request.message_queue.topic.name
        group = request.group.name
        config = self.broker.topics.get(topic)
        if config is None:
            raise GrpcStatusError(Code.TOPIC_NOT_FOUND, f"topic {topic} not exist")
        group_config = self.broker.groups.get(group)
        if group_config is not None and not group_config.consume_enable:
            raise GrpcStatusError(Code.FORBIDDEN, f"subscription group no permission, {group}")
        if not self.broker.config.readable or not config.readable:
            raise GrpcStatusError(Code.FORBIDDEN, f"the topic[{topic}] pulling message is forbidden")
        invisible = millis(request.invisible_duration.seconds, request.invisible_duration.nanos)
        if request.auto_renew:
            invisible = RENEW_SLICE_MS
        else:
            check_invisible(invisible, MIN_INVISIBLE_MS)
        filt = receive_filter(request.filter_expression)
        batch = min(max(request.batch_size, 1), MAX_BATCH)
        fifo = self.group_fifo(group, cid)
        # The request's queue id is not used: the proxy pops the broker's acting queue (-1).
        start = next(self._round_robin.setdefault((group, topic), itertools.count()))
        queues = receive_queues(config.read_queue_nums, start)
        deadline = now_ms() + poll_ms
        while True:
            found = self._pop(group, topic, queues, batch, invisible, filt, fifo)
            if found:
                yield spb.ReceiveMessageResponse(status=ok())
                resource = pb.Resource(
                    name=topic, resource_namespace=request.message_queue.topic.resource_namespace
                )
                written = 0
                try:
                    for msg, delivery in found:
                        if request.auto_renew:
                            message_id = msg.properties.get(Prop.UNIQ_KEY) or msg.offset_msg_id
                            self.renewal.add(
                                cid, group, message_id, delivery.receipt_handle, delivery.attempt
                            )
                        yield spb.ReceiveMessageResponse(message=to_grpc_message(msg, delivery, resource))
                        written += 1
                except (GeneratorExit, asyncio.CancelledError):
                    self._give_back(cid, group, [d.receipt_handle for _, d in found[written:]])
                    raise
                return
            now = now_ms()
            wake = [self.pop.next_visible_at(group, topic, q) for q in queues]
            until = min([deadline, *(w for w in wake if w is not None)])
            if now >= deadline:
                yield spb.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
                return
            await self.arrivals.wait(topic, max(until - now, 1) / 1000)

    def _give_back(self, cid: str, group: str, handles: list[str]) -> None:
        """The stream was cut before these leased messages were written: they become visible again in
        about a second rather than after their invisible time (the proxy's
        ReceiveMessageResponseStreamWriter nacks what it could not write)."""
        if not handles:
            return
        log.info(
            "ReceiveMessage stream of %s (group %s) cut: %d leased message(s) given back in %d ms",
            cid,
            group,
            len(handles),
            GIVE_BACK_MS,
        )
        latest = [self.renewal.take(group, h) for h in handles]
        task = asyncio.get_running_loop().create_task(self._change_all(group, latest))
        self._giving_back.add(task)
        task.add_done_callback(self._giving_back.discard)

    async def _change_all(self, group: str, handles: list[str]) -> None:
        for handle in handles:
            try:
                await self.pop.change_invisible(group, handle, GIVE_BACK_MS, now_ms())
            except (InvalidReceiptHandle, StoreError) as exc:
                log.warning("a cut stream's message of group %s was not given back: %s", group, exc)

    def _pop(
        self,
        group: str,
        topic: str,
        queues: list[int],
        batch: int,
        invisible_ms: int,
        filt: ReceiveFilter,
        fifo: bool,
    ) -> list[tuple[MessageExt, Delivery]]:
        """Lease up to ``batch`` messages from the queues in turn; the ones past max attempts go to the
        dead-letter queue instead."""
        store = self.broker.store
        found: list[tuple[MessageExt, Delivery]] = []
        max_attempts = self.max_attempts(group)
        for queue_id in queues:
            if len(found) >= batch:
                break
            lo, hi = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
            in_memory = (
                lo == 0 and hi > 0 and not store.in_disk(topic, queue_id, 0, self.broker.memory_for_messages)
            )
            now = now_ms()
            leases = self.pop.receive(
                group,
                topic,
                queue_id,
                batch - len(found),
                invisible_ms,
                now,
                min_offset=lo,
                max_offset=hi,
                fifo=fifo,
                accept=self._acceptor(topic, queue_id, filt),
                first_in_memory=in_memory,
            )
            for lease in leases:
                msg = self._read(topic, queue_id, lease.offset)
                if msg is None:
                    self.pop.ack_now(group, lease.receipt_handle, now)  # deleted by retention
                    continue
                if lease.attempt > max_attempts:
                    self._dead_letter(group, msg, lease.attempt)
                    self.pop.ack_now(group, lease.receipt_handle, now)
                    continue
                found.append((msg, Delivery(lease.receipt_handle, lease.attempt, invisible_ms)))
        return found

    def _acceptor(self, topic: str, queue_id: int, filt: ReceiveFilter) -> Callable[[int], bool] | None:
        if not filt.needs_properties:
            return None
        cq = self.broker.store.find_queue(topic, queue_id)
        codes = filt.tag_codes

        def accept(offset: int) -> bool:
            entry = cq.entry(offset) if cq is not None else None
            if entry is None:
                return False
            phys, _, tags_code = entry
            code = tags_code & 0xFFFFFFFF
            if codes is not None and (code - 0x100000000 if code & 0x80000000 else code) not in codes:
                return False
            data = self.broker.store.read_message(phys)
            if data is None:
                return False
            return filt.matches(decode_properties(record_properties(data).decode(errors="replace")))

        return accept

    def _read(self, topic: str, queue_id: int, offset: int) -> MessageExt | None:
        cq = self.broker.store.find_queue(topic, queue_id)
        entry = cq.entry(offset) if cq is not None else None
        data = self.broker.store.read_message(entry[0]) if entry is not None else None
        return decode_record(data) if data is not None else None

    def _dead_letter(self, group: str, msg: MessageExt, attempt: int) -> None:
        """Store the message in ``%DLQ%<group>`` (readable, one queue, as tidemq's remoting send-back
        makes it), keeping where it came from."""
        topic = dlq_topic(group)
        self.broker.topics.ensure(topic, 1, PERM_READ | PERM_WRITE)
        props = dict(msg.properties)
        props.setdefault(Prop.RETRY_TOPIC, msg.topic)
        props.setdefault(Prop.ORIGIN_MESSAGE_ID, msg.offset_msg_id)
        props[Prop.WAIT] = "false"
        props.pop(Prop.DELAY, None)
        append = self.broker.make_append_again(
            msg, topic=topic, queue_id=0, properties=props, reconsume_times=attempt - 1, schedule=False
        )
        try:
            self.broker.store.put([append])
        except StoreError as exc:
            raise GrpcStatusError(Code.INTERNAL_SERVER_ERROR, f"forward to DLQ failed: {exc}") from None
        log.info("message %s of %s moved to %s after %d attempts", msg.msg_id, msg.topic, topic, attempt - 1)

    async def client_gone(self, client_id: str) -> None:
        """A client said goodbye: what it held under auto-renew goes back to its group in a second."""
        await self.renewal.client_gone(client_id)

    async def close(self) -> None:
        await self.renewal.close()

    # --- ack, change invisible, dead letter -------------------------------------------------------------

    async def ack(self, request: spb.AckMessageRequest) -> spb.AckMessageResponse:
        """Each entry's outcome; the response's status is theirs when they agree, else MULTIPLE_RESULTS."""
        group = request.group.name
        entries = []
        for entry in request.entries:
            try:
                handle = self.renewal.take(group, entry.receipt_handle)
                result = await self.pop.ack(group, handle, now_ms())
                entry_status = ack_status(result, "ack")
            except InvalidReceiptHandle as exc:
                entry_status = status(Code.INTERNAL_SERVER_ERROR, f"Parse failed: {exc}")
            entries.append(
                spb.AckMessageResultEntry(
                    message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=entry_status
                )
            )
        codes = {e.status.code for e in entries}
        if len(codes) > 1:
            overall = status(Code.MULTIPLE_RESULTS)
        elif codes:
            overall = status(codes.pop())
        else:
            overall = status(Code.INTERNAL_SERVER_ERROR, "ack message result is empty")
        return spb.AckMessageResponse(status=overall, entries=entries)

    async def change_invisible(
        self, request: spb.ChangeInvisibleDurationRequest
    ) -> spb.ChangeInvisibleDurationResponse:
        invisible = millis(request.invisible_duration.seconds, request.invisible_duration.nanos)
        check_invisible(invisible, 0)
        try:
            result, lease = await self.pop.change_invisible(
                request.group.name,
                self.renewal.take(request.group.name, request.receipt_handle),
                invisible,
                now_ms(),
            )
        except InvalidReceiptHandle as exc:
            raise GrpcStatusError(Code.INTERNAL_SERVER_ERROR, f"Parse failed: {exc}") from None
        if lease is None:
            return spb.ChangeInvisibleDurationResponse(
                status=ack_status(result, "change invisible time", stale_ok=False)
            )
        return spb.ChangeInvisibleDurationResponse(status=ok(), receipt_handle=lease.receipt_handle)

    async def forward_to_dlq(
        self, request: spb.ForwardMessageToDeadLetterQueueRequest
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        """The consumer gave up on a message (a push consumer past its attempts): store it in the group's
        DLQ, then ack it (ForwardMessageToDLQActivity; the broker's consumerSendMsgBack with delay -1)."""
        group = request.group.name
        current = self.renewal.take(group, request.receipt_handle)
        try:
            handle = ReceiptHandle.decode(current)
        except InvalidReceiptHandle as exc:
            raise GrpcStatusError(Code.INTERNAL_SERVER_ERROR, f"Parse failed: {exc}") from None
        if handle.is_expired(now_ms()):
            raise GrpcStatusError(Code.INVALID_RECEIPT_HANDLE, "receipt handle is expired")
        msg = self._read(handle.topic, handle.queue_id, handle.offset)
        if msg is None:
            raise GrpcStatusError(Code.INTERNAL_SERVER_ERROR, "look message by offset failed")
        # Stored in the DLQ before the ack: a crash in between leaves a duplicate, never a loss.
        self._dead_letter(group, msg, request.delivery_attempt + 1)
        result = await self.pop.ack(group, current, now_ms())
        return spb.ForwardMessageToDeadLetterQueueResponse(status=ack_status(result, "forward to DLQ"))
