"""RocketMQ broker: the remoting front-end on the log store.

It owns what is RocketMQ's alone: topic and subscription-group configs with their permissions and data
version (``metadata``), consumer and delay offsets (``offsets``), topic rules and auto-creation
(``topics``), the client registry fed by heartbeats, queue locks, long polling, delayed delivery
(``schedule``) and one processor per request code (``processors/``). Its tables are durable JSON
documents of the store (``config/*.json`` in the data dir). Protocol notes:
docs/protocols/rocketmq-messages.md, docs/protocols/rocketmq-consumption.md.

It imports ``store/``, ``remoting/``, the record layout, ``aio`` and ``address``; never the clients,
``nsq/``, ``namesrv/`` or ``spark/``. Only the CLI and ``embedded`` import it.
"""
