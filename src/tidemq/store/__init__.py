"""Durable log store: a commit log of stored-layout records, per-queue consume queues, a key index and
the metadata (topics, groups, offsets) a broker persists. It knows nothing of sockets or protocols."""

from tidemq.store.config import FlushMode, StoreConfig
from tidemq.store.message_store import GetResult, GetStatus, MessageStore, PutResult, StoreError

__all__ = ["FlushMode", "GetResult", "GetStatus", "MessageStore", "PutResult", "StoreConfig", "StoreError"]
