"""The connection caps' and the bad-request log's rules (``tidemq.connection_gate``), in process."""

from __future__ import annotations

import logging

import pytest

from tidemq.connection_gate import ConnectionGate, ConnectionLimits, RateLimitedLog


def test_gate_counts_per_ip_and_in_total() -> None:
    gate = ConnectionGate(ConnectionLimits(max_connections_per_ip=2, max_connections=3))
    assert gate.admit("a") is None and gate.admit("a") is None
    assert "--max-connections-per-ip 2" in (gate.admit("a") or "")
    assert gate.admit("b") is None
    assert "--max-connections 3" in (gate.admit("c") or "")
    gate.release("a")
    assert gate.admit("c") is None
    for ip in ("a", "b", "c"):
        gate.release(ip)
    assert gate.total == 0 and not gate.by_ip


def test_zero_means_no_cap() -> None:
    gate = ConnectionGate(ConnectionLimits(max_connections_per_ip=0, max_connections=0))
    assert all(gate.admit("a") is None for _ in range(5000))
    with pytest.raises(ValueError):
        ConnectionLimits(idle_timeout_s=-1)


def test_log_writes_a_few_lines_and_counts_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test_guard")
    limited = RateLimitedLog(logger, per_second=3)
    with caplog.at_level(logging.WARNING, "test_guard"):
        for i in range(1000):
            limited.warning("bad request %d", i)
    assert len(caplog.records) <= 6  # two one-second windows at most
    assert limited.suppressed > 0
    limited._window = 0  # a new second: the next line carries the count
    with caplog.at_level(logging.WARNING, "test_guard"):
        limited.warning("bad request %d", 1000)
    assert caplog.records[-1].getMessage().endswith("similar lines suppressed)")
    assert limited.suppressed == 0
