"""An nsqd-compatible server (spec sections 1-3) on tidemq's durable log store.

Owns the TCP V2 connection's state machine, topics and channels over the store, the FIN journal, the HTTP
API, stats and the registration with nsqlookupd. May import ``tidemq.store``, the record codecs
and the shared NSQ codec at ``tidemq.nsq`` level; never ``nsq/client/`` or ``nsq/lookupd/``.
"""
