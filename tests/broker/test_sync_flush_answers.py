"""Sync flush: a send is answered once an fsync covers it, and an fsync that fails is answered
FLUSH_DISK_TIMEOUT (Java's answer) on the same connection, which goes on being served."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from tests.support import RawClient, create_topic
from tidemq.broker.broker import Broker
from tidemq.broker.config import BrokerConfig
from tidemq.remoting.codes import ResponseCode
from tidemq.store import FlushMode, StoreConfig


async def test_sync_sends_wait_for_their_fsync_and_a_failed_one_is_flush_disk_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = Broker(BrokerConfig(port=0), StoreConfig(tmp_path, flush_mode=FlushMode.SYNC))
    await broker.start()
    raw: RawClient | None = None
    try:
        addr = f"127.0.0.1:{broker.server.port}"
        await create_topic(addr, "SyncAnswers", 1)
        raw = await RawClient.open(addr)
        first = await raw.send("SyncAnswers", b"durable")
        assert first.code == ResponseCode.SUCCESS
        assert broker.store.commitlog.flushed >= broker.store.commitlog.max_offset, "answered before fsync"

        real_fsync = os.fsync

        def failing_fsync(fd: int) -> None:
            raise OSError(errno.EIO, "Input/output error (injected)")

        monkeypatch.setattr(os, "fsync", failing_fsync)
        failed = await raw.send("SyncAnswers", b"not durable")
        assert failed.code == ResponseCode.FLUSH_DISK_TIMEOUT, failed
        assert failed.queue_offset == 1, "the answer still names where the message was written"

        monkeypatch.setattr(os, "fsync", real_fsync)
        again = await raw.send("SyncAnswers", b"durable again")
        assert again.code == ResponseCode.SUCCESS and again.queue_offset == 2
        assert broker.store.commitlog.flushed >= broker.store.commitlog.max_offset
    finally:
        if raw is not None:
            raw.close()
        await broker.close()
