"""Name server: brokers register their topics here; clients ask it for routes and cluster info
(docs/protocols/rocketmq-remoting.md#name-server).

Owns the route tables and the name-server processors. Imports ``remoting`` (and ``aio``); never the
broker, the store or the clients, which reach it only over the wire.
"""

from tidemq.namesrv.server import NameServer

__all__ = ["NameServer"]
