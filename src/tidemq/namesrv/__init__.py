"""Name server: brokers register their topics here; clients ask it for routes."""

from tidemq.namesrv.server import NameServer

__all__ = ["NameServer"]
