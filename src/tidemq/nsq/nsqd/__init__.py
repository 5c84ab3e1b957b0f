"""An nsqd-compatible server on tidemq's durable log store (docs/protocols/nsq-tcp.md, nsq-nsqd.md,
nsq-http.md).

Owns the TCP V2 connection's state machine, topics and channels over the store, the FIN journal, the HTTP
API, stats and the registration with nsqlookupd. May import ``tidemq.store``, the record codecs
and the shared NSQ codec at ``tidemq.nsq`` level; never ``nsq/client/`` or ``nsq/lookupd/``.
"""
