"""The RocketMQ broker on tidemq's store: request processors, the client registry fed by heartbeats,
long polling, queue locks, delayed delivery, and the topic and subscription-group rules it enforces
(docs/protocols/rocketmq-messages.md, docs/protocols/rocketmq-consumption.md).

May import ``remoting``, ``store``, the record layout, ``aio`` and ``address``; never the clients, nsq or
spark. Only the CLI and ``embedded`` import it.
"""
