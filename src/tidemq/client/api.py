"""One coroutine per remoting call a client makes (Java's MQClientAPIImpl), over a connection.

Higher layers (producer, consumers, admin tools) build on these; nothing here keeps state.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import orjson

from tidemq.record import MessageExt, decode_records, iter_records
from tidemq.remoting import jsonx
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import Body, RemotingCommand
from tidemq.remoting.headers import PullMessageRequestHeader, SendMessageRequestHeader
from tidemq.remoting.names import AUTO_CREATE_TOPIC_KEY
from tidemq.remoting.transport import RemotingConnection

PULL_FLAG_COMMIT_OFFSET = 0x1
PULL_FLAG_SUSPEND = 0x2
PULL_FLAG_SUBSCRIPTION = 0x4


class BrokerError(Exception):
    """The broker answered with an error code; ``code`` and ``remark`` say which and why."""

    def __init__(self, code: int, remark: str | None) -> None:
        super().__init__(f"{_code_name(code)} ({code}): {remark or ''}")
        self.code = code
        self.remark = remark


def _code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return "UNKNOWN"


def _check(resp: RemotingCommand, *ok: int) -> RemotingCommand:
    if resp.code not in (ok or (ResponseCode.SUCCESS,)):
        raise BrokerError(resp.code, resp.remark)
    return resp


async def _request(conn: RemotingConnection, request: RemotingCommand, oneway: bool, timeout: float) -> None:
    """Send a request either oneway (no answer awaited) or checked."""
    if oneway:
        conn.invoke_oneway(request)
    else:
        _check(await conn.invoke(request, timeout))


@dataclass(slots=True)
class PullResult:
    code: int
    next_begin_offset: int
    min_offset: int
    max_offset: int
    #: On SUCCESS the stored records back to back, still encoded: ``messages()`` decodes them.
    body: Body
    #: The broker's advice for the next pull of this queue: 0 the master, else a slave's broker id.
    suggest_which_broker_id: int = 0

    def messages(self) -> list[MessageExt]:
        return decode_records(self.body) if self.code == ResponseCode.SUCCESS and self.body else []


def send_header(
    topic: str,
    *,
    queue_id: int = -1,
    properties: str = "",
    producer_group: str = "DEFAULT_PRODUCER",
    sys_flag: int = 0,
    batch: bool = False,
    reconsume_times: int | None = None,
    max_reconsume_times: int | None = None,
    default_topic_queue_nums: int = 4,
) -> SendMessageRequestHeader:
    """The header of SEND_MESSAGE(_V2) / SEND_BATCH_MESSAGE; new topics are created from TBW102."""
    return SendMessageRequestHeader(
        producer_group=producer_group,
        topic=topic,
        default_topic=AUTO_CREATE_TOPIC_KEY,
        default_topic_queue_nums=default_topic_queue_nums,
        queue_id=queue_id,
        sys_flag=sys_flag,
        born_timestamp=int(time.time() * 1000),
        flag=0,
        properties=properties,
        reconsume_times=reconsume_times,
        max_reconsume_times=max_reconsume_times,
        batch=batch,
    )


def pull_header(
    group: str,
    topic: str,
    queue_id: int,
    offset: int,
    *,
    max_nums: int = 32,
    expression: str | None = "*",
    expression_type: str = "TAG",
    suspend_ms: int = 0,
    commit_offset: int = 0,
) -> PullMessageRequestHeader:
    """PULL_MESSAGE's header; ``expression`` posts the subscription, None relies on the group's heartbeat."""
    sys_flag = (PULL_FLAG_SUBSCRIPTION if expression is not None else 0) | (
        PULL_FLAG_SUSPEND if suspend_ms else 0
    )
    if commit_offset > 0:
        sys_flag |= PULL_FLAG_COMMIT_OFFSET
    return PullMessageRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_msg_nums=max_nums,
        sys_flag=sys_flag,
        commit_offset=commit_offset,
        suspend_timeout_millis=suspend_ms,
        sub_version=0,
        subscription=expression,
        expression_type=expression_type,
    )


def send_request(header: SendMessageRequestHeader, body: bytes) -> RemotingCommand:
    """SEND_MESSAGE_V2, or SEND_BATCH_MESSAGE for a batch header, with V2's compact header."""
    code = RequestCode.SEND_BATCH_MESSAGE if header.batch else RequestCode.SEND_MESSAGE_V2
    return RemotingCommand(code, ext_fields=header.to_compact_ext(), body=body)


async def pull_answer(
    conn: RemotingConnection, header: PullMessageRequestHeader, timeout: float
) -> RemotingCommand:
    """PULL_MESSAGE's checked answer, body undecoded: on SUCCESS it holds the stored records."""
    return await start_pull(conn, header).answer(timeout)


@dataclass(slots=True)
class PendingPull:
    """A PULL_MESSAGE already written (``start_pull``), so the broker can work on it while this side is
    still busy with the previous answer; ``result`` collects the checked answer."""

    conn: RemotingConnection
    request: RemotingCommand
    response: asyncio.Future[RemotingCommand]

    async def answer(self, timeout: float) -> RemotingCommand:
        return checked_pull(await self.conn.answer(self.request, self.response, timeout))

    async def result(self, timeout: float) -> PullResult:
        resp = await self.answer(timeout)
        ext = resp.ext_fields
        return PullResult(
            resp.code,
            int(ext["nextBeginOffset"]),
            int(ext["minOffset"]),
            int(ext["maxOffset"]),
            resp.body or b"",
            int(ext.get("suggestWhichBrokerId") or 0),
        )


def start_pull(conn: RemotingConnection, header: PullMessageRequestHeader) -> PendingPull:
    request = pull_request(header)
    return PendingPull(conn, request, conn.start_invoke(request))


def pull_request(header: PullMessageRequestHeader) -> RemotingCommand:
    return RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields=header.to_ext())


def checked_pull(resp: RemotingCommand) -> RemotingCommand:
    """A PULL_MESSAGE answer whose code a puller acts on (found, not found, retry, offset moved); any
    other raises BrokerError."""
    return _check(
        resp,
        ResponseCode.SUCCESS,
        ResponseCode.PULL_NOT_FOUND,
        ResponseCode.PULL_RETRY_IMMEDIATELY,
        ResponseCode.PULL_OFFSET_MOVED,
    )


def create_topic_request(
    topic: str, queues: int = 4, perm: int = 6, attributes: str | None = None
) -> RemotingCommand:
    """UPDATE_AND_CREATE_TOPIC with ``queues`` read and write queues; ``attributes`` is RocketMQ 5.x's
    change list (``+message.type=FIFO``), sent only when given, as 4.x tools send none."""
    ext = {
        "topic": topic,
        "defaultTopic": AUTO_CREATE_TOPIC_KEY,
        "readQueueNums": str(queues),
        "writeQueueNums": str(queues),
        "perm": str(perm),
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": "0",
        "order": "false",
    }
    if attributes:
        ext["attributes"] = attributes
    return RemotingCommand(RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields=ext)


async def create_topic(
    conn: RemotingConnection,
    topic: str,
    queues: int = 4,
    perm: int = 6,
    timeout: float = 6.0,
    attributes: str | None = None,
) -> None:
    _check(await conn.invoke(create_topic_request(topic, queues, perm, attributes), timeout))


async def get_route(conn: RemotingConnection, topic: str, timeout: float = 3.0) -> dict[str, Any] | None:
    """Topic route from a name server, or None when it has none (TOPIC_NOT_EXIST)."""
    resp = await conn.invoke(
        RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": topic}), timeout
    )
    if resp.code == ResponseCode.TOPIC_NOT_EXIST:
        return None
    route: dict[str, Any] = jsonx.loads(bytes(_check(resp).body))
    return route


async def heartbeat(conn: RemotingConnection, body: dict[str, Any], timeout: float = 3.0) -> None:
    _check(await conn.invoke(RemotingCommand(RequestCode.HEART_BEAT, body=orjson.dumps(body)), timeout))


async def check_client_config(
    conn: RemotingConnection, group: str, client_id: str, subscription: dict[str, Any], timeout: float = 3.0
) -> None:
    """CHECK_CLIENT_CONFIG: can the broker filter as ``subscription`` asks? (SQL92 needs the broker's
    enablePropertyFilter; the broker also parses the expression.)"""
    body = {"clientId": client_id, "group": group, "subscriptionData": subscription}
    request = RemotingCommand(RequestCode.CHECK_CLIENT_CONFIG, body=orjson.dumps(body))
    _check(await conn.invoke(request, timeout))


async def query_consumer_offset(
    conn: RemotingConnection, group: str, topic: str, queue_id: int, timeout: float = 3.0
) -> int | None:
    """The group's committed offset for a queue, or None when the broker has none (QUERY_NOT_FOUND)."""
    ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id)}
    resp = await conn.invoke(RemotingCommand(RequestCode.QUERY_CONSUMER_OFFSET, ext_fields=ext), timeout)
    if resp.code == ResponseCode.QUERY_NOT_FOUND:
        return None
    return int(_check(resp).ext_fields["offset"])


async def update_consumer_offset(
    conn: RemotingConnection,
    group: str,
    topic: str,
    queue_id: int,
    offset: int,
    *,
    oneway: bool = False,
    timeout: float = 3.0,
) -> None:
    ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id), "commitOffset": str(offset)}
    await _request(conn, RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields=ext), oneway, timeout)


async def _queue_offset(
    conn: RemotingConnection,
    code: int,
    topic: str,
    queue_id: int,
    timeout: float,
    extra: dict[str, str] | None = None,
) -> int:
    ext = {"topic": topic, "queueId": str(queue_id), **(extra or {})}
    return int(_check(await conn.invoke(RemotingCommand(code, ext_fields=ext), timeout)).ext_fields["offset"])


async def get_max_offset(conn: RemotingConnection, topic: str, queue_id: int, timeout: float = 3.0) -> int:
    return await _queue_offset(conn, RequestCode.GET_MAX_OFFSET, topic, queue_id, timeout)


async def get_min_offset(conn: RemotingConnection, topic: str, queue_id: int, timeout: float = 3.0) -> int:
    return await _queue_offset(conn, RequestCode.GET_MIN_OFFSET, topic, queue_id, timeout)


async def search_offset(
    conn: RemotingConnection, topic: str, queue_id: int, timestamp_ms: int, timeout: float = 3.0
) -> int:
    return await _queue_offset(
        conn,
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
        topic,
        queue_id,
        timeout,
        {"timestamp": str(timestamp_ms)},
    )


async def consumer_ids(conn: RemotingConnection, group: str, timeout: float = 3.0) -> list[str] | None:
    """Client ids of the group's live consumers, or None when the broker knows none."""
    resp = await conn.invoke(
        RemotingCommand(RequestCode.GET_CONSUMER_LIST_BY_GROUP, ext_fields={"consumerGroup": group}), timeout
    )
    if resp.code != ResponseCode.SUCCESS or not resp.body:
        return None
    return [str(cid) for cid in jsonx.loads(bytes(resp.body)).get("consumerIdList") or []]


async def send_back(
    conn: RemotingConnection,
    msg: MessageExt,
    group: str,
    delay_level: int,
    max_reconsume_times: int,
    timeout: float = 3.0,
) -> None:
    """CONSUMER_SEND_MSG_BACK: hand a failed message back for redelivery through the retry topic."""
    ext = {
        "offset": str(msg.commit_log_offset),
        "group": group,
        "delayLevel": str(delay_level),
        "originMsgId": msg.msg_id,
        "originTopic": msg.topic,
        "unitMode": "false",
        "maxReconsumeTimes": str(max_reconsume_times),
    }
    _check(await conn.invoke(RemotingCommand(RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields=ext), timeout))


async def lock_batch(
    conn: RemotingConnection, group: str, client_id: str, queues: list[dict[str, Any]], timeout: float = 3.0
) -> list[dict[str, Any]]:
    body = orjson.dumps({"consumerGroup": group, "clientId": client_id, "mqSet": queues})
    resp = _check(await conn.invoke(RemotingCommand(RequestCode.LOCK_BATCH_MQ, body=body), timeout))
    locked: list[dict[str, Any]] = jsonx.loads(bytes(resp.body)).get("lockOKMQSet") or []
    return locked


async def unlock_batch(
    conn: RemotingConnection,
    group: str,
    client_id: str,
    queues: list[dict[str, Any]],
    *,
    oneway: bool = False,
    timeout: float = 3.0,
) -> None:
    body = orjson.dumps({"consumerGroup": group, "clientId": client_id, "mqSet": queues})
    await _request(conn, RemotingCommand(RequestCode.UNLOCK_BATCH_MQ, body=body), oneway, timeout)


async def unregister_client(
    conn: RemotingConnection,
    client_id: str,
    *,
    producer_group: str | None = None,
    consumer_group: str | None = None,
    timeout: float = 3.0,
) -> None:
    ext = {"clientID": client_id}
    if producer_group:
        ext["producerGroup"] = producer_group
    if consumer_group:
        ext["consumerGroup"] = consumer_group
    _check(await conn.invoke(RemotingCommand(RequestCode.UNREGISTER_CLIENT, ext_fields=ext), timeout))


async def view_message(conn: RemotingConnection, commit_log_offset: int, timeout: float = 3.0) -> MessageExt:
    request = RemotingCommand(RequestCode.VIEW_MESSAGE_BY_ID, ext_fields={"offset": str(commit_log_offset)})
    resp = _check(await conn.invoke(request, timeout))
    return next(iter_records(resp.body))


async def query_message(
    conn: RemotingConnection,
    topic: str,
    key: str,
    *,
    max_num: int = 32,
    begin_ms: int = 0,
    end_ms: int = 2**62,
    unique_key: bool = False,
    timeout: float = 5.0,
) -> list[MessageExt]:
    ext = {
        "topic": topic,
        "key": key,
        "maxNum": str(max_num),
        "beginTimestamp": str(begin_ms),
        "endTimestamp": str(end_ms),
        "_UNIQUE_KEY_QUERY": "true" if unique_key else "false",
    }
    resp = await conn.invoke(RemotingCommand(RequestCode.QUERY_MESSAGE, ext_fields=ext), timeout)
    if resp.code == ResponseCode.QUERY_NOT_FOUND:
        return []
    return decode_records(_check(resp).body)


async def call_json(
    conn: RemotingConnection, code: int, ext: dict[str, str] | None = None, timeout: float = 3.0
) -> Any:
    """An admin call whose answer is a JSON body (fastjson object keys allowed)."""
    resp = _check(await conn.invoke(RemotingCommand(code, ext_fields=ext or {}), timeout))
    return jsonx.loads(bytes(resp.body)) if resp.body else None
