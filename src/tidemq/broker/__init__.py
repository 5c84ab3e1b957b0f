"""RocketMQ broker: the remoting front-end on the log store.

It owns what is RocketMQ's alone: topic and subscription-group configs with their permissions and data
version (``metadata``), consumer and delay offsets (``offsets``), topic rules and auto-creation
(``topics``), client and lock registries, long polling, delayed delivery (``schedule``) and one
processor per request code (``processors/``). Its tables are durable JSON documents of the store
(``config/*.json`` in the data dir).

It imports ``store/`` and ``remoting/``, never ``client/``, ``nsq/`` or ``namesrv/``.
"""
