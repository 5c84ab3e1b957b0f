"""Admin operations the CLI needs (a small subset of Java's mqadmin), over the same client instance."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from tidemq.address import is_host_port
from tidemq.client import api
from tidemq.client.config import ClientConfig
from tidemq.client.instance import ClientInstance, MQClientError
from tidemq.client.route import TopicRoute
from tidemq.record import MessageDecodeError, MessageExt, Prop, decode_offset_msg_id, decode_records
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.names import retry_topic
from tidemq.remoting.route import MASTER_ID
from tidemq.remoting.transport import RemotingConnection, RemotingError

#: Java's RequestCode.UPDATE_BROKER_CONFIG: admin-only under ACL, a no-op without a body.
UPDATE_BROKER_CONFIG = 25


@dataclass(slots=True)
class QueueProgress:
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int

    @property
    def lag(self) -> int:
        return max(0, self.broker_offset - self.consumer_offset)


class Admin:
    def __init__(self, namesrv_addr: str, *, credentials: tuple[str, str] | None = None) -> None:
        """``credentials`` (access key, secret key) sign every call, for brokers with plain ACL on."""
        self.instance = ClientInstance(
            ClientConfig(
                namesrv_addr=namesrv_addr, instance_name=f"admin-{os.getpid()}", credentials=credentials
            )
        )

    async def close(self) -> None:
        await self.instance.close()

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _cluster_info(self) -> dict[str, Any]:
        info: dict[str, Any] = await self.instance.namesrv_call(
            lambda c: api.call_json(c, RequestCode.GET_BROKER_CLUSTER_INFO)
        )
        return info

    async def cluster_masters(self, cluster: str | None = None) -> dict[str, str]:
        """broker name -> master address, for one cluster or all."""
        info = await self._cluster_info()
        names = set(info.get("clusterAddrTable", {}).get(cluster, [])) if cluster else None
        out = {}
        for name, data in (info.get("brokerAddrTable") or {}).items():
            addrs = {int(k): v for k, v in (data.get("brokerAddrs") or {}).items()}
            if MASTER_ID in addrs and (names is None or name in names):
                out[name] = addrs[MASTER_ID]
        return out

    async def create_topic(
        self,
        topic: str,
        queues: int,
        cluster: str | None = None,
        *,
        message_type: str | None = None,
        attributes: dict[str, str | None] | None = None,
    ) -> list[str]:
        """Create or update ``topic`` on every master. ``message_type`` (NORMAL, FIFO, DELAY, TRANSACTION)
        is RocketMQ 5.x's ``message.type`` attribute, what a 5.x (gRPC) producer may send to it;
        ``attributes`` are any 5.x topic attributes, a value of None deleting one."""
        changes: dict[str, str | None] = dict(attributes or {})
        if message_type is not None:
            changes["message.type"] = message_type.upper()
        text = ",".join(f"-{k}" if v is None else f"+{k}={v}" for k, v in changes.items()) or None
        masters = await self.cluster_masters(cluster)
        if not masters:
            raise MQClientError(f"no broker found{' in cluster ' + cluster if cluster else ''}")
        for addr in masters.values():
            await api.create_topic(await self.instance.connection(addr), topic, queues, attributes=text)
        return sorted(masters)

    async def topic_list(self) -> list[str]:
        data = await self.instance.namesrv_call(
            lambda c: api.call_json(c, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        )
        return sorted(data.get("topicList") or [])

    async def route(self, topic: str) -> TopicRoute:
        route = await self.instance.update_route(topic)
        if route is None:
            raise MQClientError(f"topic {topic!r} does not exist (no route on the name server)")
        return route

    async def topic_stats(self, topic: str) -> list[dict[str, Any]]:
        rows = []
        for name, broker in sorted((await self.route(topic)).brokers.items()):
            if MASTER_ID not in broker.addrs:
                continue
            conn = await self.instance.connection(broker.addrs[MASTER_ID])
            data = await api.call_json(conn, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
            for key, stats in (data.get("offsetTable") or {}).items():
                mq = dict(key) if isinstance(key, tuple) else {}
                rows.append({"broker": name, "queue": int(mq.get("queueId", -1)), **stats})
        return sorted(rows, key=lambda r: (r["broker"], r["queue"]))

    async def broker_addresses(self) -> dict[str, str]:
        """Every broker address (masters and slaves) the name server knows -> the broker's name."""
        info = await self._cluster_info()
        return {
            addr: name
            for name, data in (info.get("brokerAddrTable") or {}).items()
            for addr in (data.get("brokerAddrs") or {}).values()
        }

    async def group_progress(self, group: str, topic: str | None = None) -> dict[str, list[QueueProgress]]:
        """Per topic: every queue's broker max offset, the group's committed offset and the lag.

        Asked for every topic the group has offsets on, then filtered: asked for one topic, a broker
        answers with zeros even for a group it has never seen (as Java's does), which would read as
        "no lag". No offsets at all is an error, as mqadmin's consumerProgress says.
        """
        out: dict[str, list[QueueProgress]] = {}
        ext = {"consumerGroup": group}
        for name, addr in sorted((await self.cluster_masters()).items()):
            data = await api.call_json(
                await self.instance.connection(addr), RequestCode.GET_CONSUME_STATS, ext
            )
            for key, stats in ((data or {}).get("offsetTable") or {}).items():
                mq = dict(key) if isinstance(key, tuple) else {}
                if topic is not None and mq.get("topic") != topic:
                    continue
                out.setdefault(str(mq.get("topic")), []).append(
                    QueueProgress(
                        name,
                        int(mq.get("queueId", -1)),
                        int(stats.get("brokerOffset", 0)),
                        int(stats.get("consumerOffset", 0)),
                    )
                )
        if not out:
            where, which = (f" for topic {topic!r}", "group or topic") if topic else ("", "group")
            raise MQClientError(
                f"group {group!r} has no committed offsets{where} on any broker "
                f"(no such {which}, or it has not consumed anything yet)"
            )
        for rows in out.values():
            rows.sort(key=lambda p: (p.broker_name, p.queue_id))
        return out

    async def message_by_id(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """By offset message id, or by unique key within ``topic``, as mqadmin's viewMessage(topic, id).

        Both are 32 hex digits: the offset id (what the broker returns) is a broker address and a
        commit-log offset; the unique key (UNIQ_KEY, the msg_id a producer reports) starts with the
        producer's IP and pid. An id is read as an offset id only when it names a broker the name server
        knows, so a unique key never sends a request to some producer host's "port".
        """
        try:
            addr, offset = decode_offset_msg_id(msg_id)
        except MessageDecodeError:
            addr, offset = "", -1
        brokers = await self.broker_addresses() if offset >= 0 else {}
        unique_key_hint = (
            "if it is a message's unique key (the msg_id a producer prints), give --topic to look it up"
        )
        problem = f"{msg_id!r} is not the offset message id of a known broker"
        # A broker advertised by host name is not found by the id's IP: without a topic, try the address.
        if offset >= 0 and (addr in brokers or (topic is None and is_host_port(addr))):
            try:
                msg = await api.view_message(await self.instance.connection(addr), offset)
            except api.BrokerError as exc:
                problem = f"no message at commit-log offset {offset} of broker {addr}: {exc.remark}"
            except RemotingError as exc:
                problem = f"{msg_id!r} names broker {addr}, which cannot be reached ({exc})"
            else:
                if topic is None or msg.topic == topic:
                    msg.broker_name = msg.broker_name or brokers.get(addr, "")
                    return msg
        if topic is None:
            raise MQClientError(f"{problem}; {unique_key_hint}")
        found = await self.query(topic, msg_id, unique_key=True, max_num=1)
        if not found:
            raise MQClientError(f"no message with id {msg_id!r} in topic {topic!r}")
        return found[0]

    async def query(
        self, topic: str, key: str, *, unique_key: bool = False, max_num: int = 64
    ) -> list[MessageExt]:
        """Messages of ``topic`` with this key (or unique key): up to ``max_num`` from each broker, oldest
        first."""
        found: list[MessageExt] = []
        for name, broker in sorted((await self.route(topic)).brokers.items()):
            if MASTER_ID in broker.addrs:
                conn = await self.instance.connection(broker.addrs[MASTER_ID])
                for msg in await api.query_message(conn, topic, key, max_num=max_num, unique_key=unique_key):
                    msg.broker_name = name
                    found.append(msg)
        found.sort(key=lambda m: (m.store_timestamp, m.broker_name, m.queue_id, m.queue_offset))
        return found

    # -- what the web console needs (rocketmq-dashboard's everyday calls) --

    async def _each_master(self, code: int, ext: dict[str, str]) -> list[str]:
        """Send one admin request to every master; the broker names it was sent to."""
        masters = await self.cluster_masters()
        for addr in masters.values():
            await api.call_json(await self.instance.connection(addr), code, ext)
        return sorted(masters)

    async def delete_topic(self, topic: str) -> list[str]:
        """As mqadmin deleteTopic: from every master, then from the name servers' routes."""
        brokers = await self._each_master(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})
        await self.instance.namesrv_call(
            lambda c: api.call_json(c, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic})
        )
        return brokers

    async def check_admin_account(self) -> None:
        """Raise :class:`api.BrokerError` unless every master takes this client's account as an admin:
        one admin-only request (UPDATE_BROKER_CONFIG with no body, which changes nothing) that the ACL
        checks before any processor; a broker that does not serve the code still vouched for the account."""
        for addr in (await self.cluster_masters()).values():
            conn = await self.instance.connection(addr)
            answer = await conn.invoke(RemotingCommand(UPDATE_BROKER_CONFIG), 3.0)
            if answer.code not in (ResponseCode.SUCCESS, ResponseCode.REQUEST_CODE_NOT_SUPPORTED):
                raise api.BrokerError(answer.code, answer.remark)

    async def runtime_info(self) -> dict[str, dict[str, str]]:
        """Broker name -> GET_BROKER_RUNTIME_INFO's table (put/get totals, commit-log offsets, ...)."""
        return {
            name: await self.broker_runtime_info(addr)
            for name, addr in sorted((await self.cluster_masters()).items())
        }

    async def broker_runtime_info(self, addr: str) -> dict[str, str]:
        """One broker's GET_BROKER_RUNTIME_INFO table, for a caller that asks each on its own (a page
        that still shows the brokers that answer when one does not)."""
        data = await api.call_json(await self.instance.connection(addr), RequestCode.GET_BROKER_RUNTIME_INFO)
        return dict((data or {}).get("table") or {})

    async def group_list(self) -> list[str]:
        """Every subscription group the masters know (system groups included)."""
        groups: set[str] = set()
        for addr in (await self.cluster_masters()).values():
            data = await api.call_json(
                await self.instance.connection(addr), RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG
            )
            groups |= set((data or {}).get("subscriptionGroupTable") or {})
        return sorted(groups)

    async def consumer_connections(self, group: str) -> list[dict[str, Any]]:
        """The group's online members (client id, address, language, version) on every master; empty when
        none is online (the broker answers CONSUMER_NOT_ONLINE)."""
        members: dict[str, dict[str, Any]] = {}
        ext = {"consumerGroup": group}
        for addr in (await self.cluster_masters()).values():
            try:
                data = await api.call_json(
                    await self.instance.connection(addr), RequestCode.GET_CONSUMER_CONNECTION_LIST, ext
                )
            except api.BrokerError:
                continue
            for conn in (data or {}).get("connectionSet") or []:
                members[str(conn.get("clientId"))] = dict(conn)
        return [members[k] for k in sorted(members)]

    async def delete_group(self, group: str) -> list[str]:
        """As mqadmin deleteSubGroup: the group's config, offsets and retry topic, on every master."""
        return await self._each_master(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": group})

    async def reset_offset(self, group: str, topic: str, to: str | int) -> dict[tuple[str, int], int]:
        """Move the group's offset on each queue of ``topic`` to ``to`` ("earliest", "latest" or a
        timestamp in ms), as mqadmin's resetOffsetByTime does: each master computes the offsets and
        tells the group's online consumers (INVOKE_BROKER_TO_RESET_OFFSET, forced); where none is online
        (CONSUMER_NOT_ONLINE) the offsets are committed directly (UPDATE_CONSUMER_OFFSET per queue)."""
        timestamp = 0 if to == "earliest" else -1 if to == "latest" else int(to)
        done: dict[tuple[str, int], int] = {}
        for name, broker in sorted((await self.route(topic)).brokers.items()):
            if MASTER_ID not in broker.addrs:
                continue
            conn = await self.instance.connection(broker.addrs[MASTER_ID])
            ext = {"topic": topic, "group": group, "timestamp": str(timestamp), "isForce": "true"}
            try:
                data = await api.call_json(conn, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext)
            except api.BrokerError as exc:
                if exc.code != ResponseCode.CONSUMER_NOT_ONLINE:
                    raise
                done |= await self._commit_offsets(conn, name, group, topic, to)
                continue
            for key, offset in ((data or {}).get("offsetTable") or {}).items():
                queue_id = int(dict(key).get("queueId", -1)) if isinstance(key, tuple) else -1
                done[(name, queue_id)] = int(offset)
        return done

    async def _commit_offsets(
        self, conn: RemotingConnection, name: str, group: str, topic: str, to: str | int
    ) -> dict[tuple[str, int], int]:
        """mqadmin's resetOffsetByTimeOld: a stopped group's offsets, committed queue by queue."""
        done: dict[tuple[str, int], int] = {}
        data = await api.call_json(conn, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
        for key in (data or {}).get("offsetTable") or {}:
            queue_id = int(dict(key).get("queueId", -1)) if isinstance(key, tuple) else -1
            if to == "earliest":
                offset = await api.get_min_offset(conn, topic, queue_id)
            elif to == "latest":
                offset = await api.get_max_offset(conn, topic, queue_id)
            else:
                offset = await api.search_offset(conn, topic, queue_id, int(to))
            await api.update_consumer_offset(conn, group, topic, queue_id, offset)
            done[(name, queue_id)] = offset
        return done

    async def messages_between(
        self, topic: str, begin_ms: int, end_ms: int, *, max_num: int = 64
    ) -> list[MessageExt]:
        """Messages of ``topic`` stored in [begin_ms, end_ms], up to ``max_num`` per queue, oldest first:
        rocketmq-dashboard's topic search (each queue's offsets by time, then a plain pull)."""
        found: list[MessageExt] = []
        route = await self.route(topic)
        for name, broker in sorted(route.brokers.items()):
            if MASTER_ID not in broker.addrs:
                continue
            conn = await self.instance.connection(broker.addrs[MASTER_ID])
            queues = max((q.read_queue_nums for q in route.queue_datas if q.broker_name == name), default=0)
            for queue_id in range(queues):
                offset = await api.search_offset(conn, topic, queue_id, begin_ms)
                end = await api.get_max_offset(conn, topic, queue_id)
                while offset < end and sum(1 for m in found if m.queue_id == queue_id) < max_num:
                    header = api.pull_header(_TOOLS_GROUP, topic, queue_id, offset, max_nums=32)
                    result = await api.start_pull(conn, header).result(5.0)
                    if result.code != ResponseCode.SUCCESS or result.next_begin_offset <= offset:
                        break
                    for msg in decode_records(result.body):
                        if begin_ms <= msg.store_timestamp <= end_ms:
                            msg.broker_name = name
                            found.append(msg)
                    offset = result.next_begin_offset
        found.sort(key=lambda m: (m.store_timestamp, m.broker_name, m.queue_id, m.queue_offset))
        return found

    async def resend(self, msg: MessageExt, group: str) -> str:
        """Send a stored message again to ``group`` alone, through the group's %RETRY% topic with its
        original topic in RETRY_TOPIC, as a consumer's send-back does: every consumer of the group takes
        it, other groups do not. (rocketmq-dashboard's CONSUME_MESSAGE_DIRECTLY needs an online consumer
        and bypasses the queue; this works with the group offline too.) The new message's unique key."""
        from tidemq.client.message import Message
        from tidemq.client.producer import Producer

        props = {k: v for k, v in msg.properties.items() if k not in _NOT_RESENT}
        props.setdefault(Prop.RETRY_TOPIC, msg.topic)
        props[Prop.ORIGIN_MESSAGE_ID] = msg.properties.get(Prop.ORIGIN_MESSAGE_ID) or msg.msg_id
        config = self.instance.config
        producer = Producer(
            "CONSOLE_RESEND_PG",
            config=ClientConfig(
                namesrv_addr=config.namesrv_addr,
                instance_name=f"resend-{os.getpid()}",
                credentials=config.credentials,
            ),
        )
        async with producer:
            result = await producer.send(
                Message(retry_topic(group), msg.body, properties=props, flag=msg.flag)
            )
        return str(result.msg_id)


#: The consumer group name RocketMQ's tools pull with.
_TOOLS_GROUP = "TOOLS_CONSUMER"
#: What a resent message must not carry over: the broker's and producer's own bookkeeping.
_NOT_RESENT = {
    Prop.UNIQ_KEY,
    Prop.DELAY,
    Prop.REAL_TOPIC,
    Prop.REAL_QID,
    Prop.MIN_OFFSET,
    Prop.MAX_OFFSET,
    Prop.TRAN_MSG,
    Prop.PGROUP,
    Prop.RECONSUME_TIME,
    Prop.CONSUME_START_TIME,
}
