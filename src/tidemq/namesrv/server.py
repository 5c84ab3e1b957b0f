"""Name server processors (docs/protocols/rocketmq-remoting.md#name-server) and the process that serves
them."""

from __future__ import annotations

import asyncio
import logging
import time
import zlib

import orjson

from tidemq.address import LOCALHOST
from tidemq.aio import cancel_and_wait
from tidemq.connection_gate import ConnectionLimits
from tidemq.namesrv.register_body import parse_register_body
from tidemq.namesrv.route_info import RouteInfo
from tidemq.remoting.bodies import json_object
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.headers import (
    GetRouteInfoRequestHeader,
    RegisterBrokerRequestHeader,
    TopicRequestHeader,
    UnregisterBrokerRequestHeader,
)
from tidemq.remoting.transport import RemotingConnection, RemotingServer, RequestDispatcher

log = logging.getLogger(__name__)

FAQ_URL = "https://rocketmq.apache.org/docs/bestPractice/06FAQ"


class NameServer:
    def __init__(
        self,
        host: str = LOCALHOST,
        port: int = 9876,
        *,
        broker_expiry_s: float = 120.0,
        limits: ConnectionLimits | None = None,
    ) -> None:
        self.routes = RouteInfo(broker_expiry_s)
        dispatcher = RequestDispatcher()
        dispatcher.register(RequestCode.REGISTER_BROKER, self.register_broker)
        dispatcher.register(RequestCode.UNREGISTER_BROKER, self.unregister_broker)
        dispatcher.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self.get_route)
        dispatcher.register(RequestCode.GET_BROKER_CLUSTER_INFO, self.get_cluster_info)
        dispatcher.register(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, self.get_topic_list)
        dispatcher.register(RequestCode.DELETE_TOPIC_IN_NAMESRV, self.delete_topic)
        dispatcher.register(RequestCode.QUERY_DATA_VERSION, self.query_data_version)
        self.server = RemotingServer(
            dispatcher, host, port, on_close=self.routes.connection_closed, limits=limits
        )
        self._expiry: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        await self.server.start()
        self._expiry = asyncio.create_task(self._expire_loop())
        log.info("name server listening on %s:%d", self.server.host, self.server.port)

    async def _expire_loop(self) -> None:
        interval = min(10.0, self.routes.broker_expiry_s / 4)
        while True:
            await asyncio.sleep(interval)
            self.routes.expire()

    async def close(self) -> None:
        if self._expiry is not None:
            await cancel_and_wait([self._expiry])
        await self.server.close()

    # --- processors ---------------------------------------------------------------------------------

    def register_broker(self, conn: RemotingConnection, req: RemotingCommand) -> RemotingCommand:
        header = RegisterBrokerRequestHeader.from_ext(req.ext_fields)
        if header.body_crc32 and (zlib.crc32(req.body) & 0x7FFFFFFF) != header.body_crc32:
            return req.error(ResponseCode.SYSTEM_ERROR, "register broker body CRC32 mismatch")
        # A body of the wrong shape raises BodyError: the transport answers SYSTEM_ERROR naming the field.
        data_version, topics = parse_register_body(bytes(req.body), header.compressed)
        master = self.routes.register(
            header.cluster_name,
            header.broker_addr,
            header.broker_name,
            header.broker_id,
            header.ha_server_addr,
            data_version,
            topics,
            conn,
        )
        ext = (
            {"haServerAddr": self.routes.live[master].ha_server_addr, "masterAddr": master} if master else {}
        )
        return req.response(ext_fields=ext)

    def unregister_broker(self, conn: RemotingConnection, req: RemotingCommand) -> RemotingCommand:
        header = UnregisterBrokerRequestHeader.from_ext(req.ext_fields)
        self.routes.unregister(header.cluster_name, header.broker_addr, header.broker_name, header.broker_id)
        return req.response()

    def get_route(self, conn: RemotingConnection, req: RemotingCommand) -> RemotingCommand:
        header = GetRouteInfoRequestHeader.from_ext(req.ext_fields)
        route = self.routes.route(header.topic)
        if route is None:
            return req.error(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {header.topic}\n"
                f"See {FAQ_URL} for further details.",
            )
        return req.response(body=orjson.dumps(route))

    def get_cluster_info(self, conn: RemotingConnection, req: RemotingCommand) -> RemotingCommand:
        return req.response(body=orjson.dumps(self.routes.cluster_info()))

    def get_topic_list(self, conn: RemotingConnection, req: RemotingCommand) -> RemotingCommand:
        return req.response(body=orjson.dumps({"topicList": sorted(self.routes.topic_queues)}))

    def delete_topic(self, conn: RemotingConnection, req: RemotingCommand) -> RemotingCommand:
        self.routes.delete_topic(TopicRequestHeader.from_ext(req.ext_fields).topic)
        return req.response()

    def query_data_version(self, conn: RemotingConnection, req: RemotingCommand) -> RemotingCommand:
        addr = req.ext_fields.get("brokerAddr", "")
        live = self.routes.live.get(addr)
        body = json_object(req.body, "query data version") if req.body else {}
        changed = live is None or live.data_version != body
        if live is not None:
            live.last_update = time.monotonic()
        return req.response(
            ext_fields={"changed": "true" if changed else "false"},
            body=orjson.dumps(live.data_version) if live else b"",
        )
