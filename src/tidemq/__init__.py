"""tidemq: a pure-Python message queue speaking RocketMQ 4.x remoting and NSQ.

The packages, bottom layer first; each entry says what the package may import, and each ``__init__``
says what it owns (``tests/test_architecture.py`` checks the rules):

- ``aio``, ``address``: small asyncio helpers and ``host:port`` parsing; they import nothing of tidemq.
- ``record/``: the stored message layout (field offsets, flags, properties, message ids, batches) and its
  codecs; imports only ``aio`` and ``address``.
- ``store/``: the durable log store every front-end shares (commit log, consume queues, key index,
  checkpoints); knows no protocol and imports no front-end.
- ``remoting/``: RocketMQ's wire protocol, sans-IO codecs then the asyncio transport; no server internals.
- ``namesrv/``: the RocketMQ name server (route tables); on ``remoting``.
- ``broker/``: the RocketMQ broker (request processors, client registry, long polling, locks, delays,
  topic and group metadata); on ``remoting`` and ``store``.
- ``nsq/``: NSQ: the shared V2 codec and HTTP conventions, the nsqd server (``nsqd/``, on ``store`` and
  ``record``, never ``remoting`` or ``broker``), nsqlookupd (``lookupd/``) and the NSQ client
  (``client/``, wire protocol only).
- ``client/``: RocketMQ producer and consumers; wire protocol only, so never ``broker``, ``store`` or
  ``namesrv``.
- ``spark/``: the PySpark source and sink, through ``client``; same rule as ``client``.
- ``cli/``, ``embedded``, ``demo``: the ``tidemq`` command and the one-process server; they may import
  anything.

The protocols are described in ``docs/protocols/``; code comments point at its sections.
"""

__version__ = "0.1.0"
