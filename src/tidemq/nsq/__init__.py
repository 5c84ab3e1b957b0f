"""NSQ on tidemq: the wire codec shared by three sides, and the sides themselves.

This level owns what the server, the client and lookupd all speak: ``protocol`` (TCP V2/V1 frames and the
command codec), ``compression`` (snappy and deflate streams) and ``http`` (nsqd's V1 HTTP conventions); and
``transitions``, the ``(state, event) -> state`` table both connection state machines (nsqd's and the
client's) are declared as.
These modules import nothing from ``nsqd/``, ``client/``, ``lookupd/`` or ``store/``.

- ``nsqd/``: the nsqd-compatible server on tidemq's store;
- ``lookupd/``: the nsqlookupd-compatible discovery server;
- ``client/``: the Python consumer and producer, which speak only the wire protocol.
"""
