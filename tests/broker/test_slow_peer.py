"""A remoting client that never reads its answers is closed after the slow-peer deadline (120 s by
default, BrokerConfig.slow_peer_timeout_s), and the broker keeps serving the others; checked against a real
``tidemq server`` with the deadline set to 1 s (docs/rocketmq-broker.md#connection-limits)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.broker.test_connection_limits import MIB, pull_frame
from tests.nsq.test_http_guard import connect, log_text, read_until_closed
from tests.server.test_connection_caps import served
from tests.support import RawClient, ServerProcess, create_topic, unique
from tidemq.remoting.codes import ResponseCode

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

DEADLINE_S = 1.0
SCRIPT = Path(__file__).with_name("slow_peer_server.py")


def another_client_is_served(server: ServerProcess) -> bool:
    sock = connect(server.broker)
    try:
        return served("broker", sock)
    finally:
        sock.close()


class SlowPeerServer(ServerProcess):
    def args(self) -> list[str]:
        args = super().args()
        assert args[1:3] == ["-m", "tidemq"]
        return [sys.executable, str(SCRIPT), str(DEADLINE_S), *args[3:]]


async def test_a_client_that_never_reads_is_closed_and_others_are_served(tmp_path: Path) -> None:
    server = SlowPeerServer(tmp_path / "data", "--no-grpc", "--no-nsq", "--no-lookupd").start()
    try:
        topic = unique("SlowPeer")
        await create_topic(server.broker, topic, queues=1)
        producer = await RawClient.open(server.broker)
        for _ in range(16):
            sent = await producer.send(topic, b"x" * (MIB - 1024))
            assert sent.code == ResponseCode.SUCCESS, sent.remark
        producer.close()
        start = server.log_path.stat().st_size
        sleeper = connect(server.broker)
        sleeper.sendall(pull_frame(topic, 1, offset=0, suspend_ms=0) * 50)  # answers of 16 MiB each
        deadline = time.monotonic() + 30
        while "it read nothing" not in log_text(server, start) and time.monotonic() < deadline:
            time.sleep(0.2)
            assert another_client_is_served(server), "the broker stopped serving another client"
        log = log_text(server, start)
        assert "it read nothing for 1 s" in log, log[-2000:]
        got, closed = read_until_closed(sleeper, 10.0)
        assert closed, f"the client that never read is still connected ({len(got)} bytes read)"
        sleeper.close()
        assert another_client_is_served(server)
        assert "Traceback" not in log, log[-2000:]
    finally:
        server.stop()
