"""Durable log store, shared by every front-end (the RocketMQ broker and nsqd alike).

It owns the commit log of stored-layout records, the per-queue consume queues, the key index, the
dispatch checkpoint and recovery, retention, and ``documents``: named durable JSON documents a front-end
keeps its own metadata in (the broker's topic and offset tables, nsqd's topic and channel state), and
``TimeIndex``: a durable index of record references by due time, for front-ends that deliver later, and
``PopStore``: pop-style consumption state (in flight, invisible until, receipt handles) per group and queue.

It knows nothing of sockets or protocols and imports no front-end (``broker/``, ``nsq/``, ``namesrv/``,
``client/``): only the stored record layout and ``aio``.
"""

from tidemq.store.config import FlushMode, StoreConfig
from tidemq.store.message_store import MessageStore
from tidemq.store.pop import PopStore
from tidemq.store.requests import GetResult, GetStatus, PutResult, StoreError
from tidemq.store.timer_index import TimeIndex

__all__ = [
    "FlushMode",
    "GetResult",
    "GetStatus",
    "MessageStore",
    "PopStore",
    "PutResult",
    "StoreConfig",
    "StoreError",
    "TimeIndex",
]
