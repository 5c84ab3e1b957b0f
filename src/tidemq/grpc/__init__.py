"""The RocketMQ 5.x gRPC front-end (``apache.rocketmq.v2.MessagingService``) beside ``broker/`` and ``nsq/``.

It plays the role of Apache RocketMQ's proxy in local mode: it reaches the broker's core services (topic
metadata, the store, timers) through the :class:`~tidemq.broker.broker.Broker` object, never the remoting
request handlers (``broker/processors``), the remoting transport, ``nsq/``, ``client/``, ``namesrv/``,
``spark/`` or ``cli/``. See docs/protocols/rocketmq-grpc.md.

Modules: ``proto/`` (the protocol, generated), ``status`` (codes and errors), ``convert`` (a gRPC message to
a stored one), ``settings`` (the Telemetry settings answer), ``routes`` (QueryRoute/QueryAssignment),
``service`` (the RPCs), ``server`` (the grpc.aio listener); the consumer side: ``consumer`` (receive, ack,
change-invisible, DLQ), ``outgoing`` (a stored message as received, filters), ``renewal`` (auto-renewed
receipt handles).
"""
