"""The web console: what rocketmq-dashboard and nsqadmin users look at every day (overview, topics,
consumer groups, messages, dead letters, NSQ), as server-rendered pages with small vanilla JS.

A client of the servers' public protocols only, like the dashboards it stands in for: RocketMQ admin calls
through :mod:`tidemq.client` and nsqd/nsqlookupd's HTTP APIs, so it works against a real Apache RocketMQ
cluster and a real nsqd too. It may import tidemq.client, tidemq.record, tidemq.remoting's names and
codes, tidemq.address and tidemq.aio; never the broker, the store, the name server or nsqd.
"""

from tidemq.console.app import create_console_app
from tidemq.console.settings import ConsoleSettings

__all__ = ["ConsoleSettings", "create_console_app"]
