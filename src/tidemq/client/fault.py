"""A failed send: whether it is tried again on another queue (``retryable``, as Java's producer), and
send-latency fault avoidance (Java MQFaultStrategy), off by default as in Java: when on, a broker that
answered slowly or failed is skipped for a while, longer the worse it did (a failed send counts as 30 s
of latency, so one failure keeps a broker out for 10 minutes with the default tables)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from tidemq.client import api
from tidemq.client.instance import MQClientError
from tidemq.remoting.codes import ResponseCode
from tidemq.remoting.transport import RemotingError

#: Latency upper bounds (ms) and how long a broker that reached each is avoided (ms), as in Java.
LATENCY_MAX_MS = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_DURATION_MS = (0, 0, 30000, 60000, 120000, 180000, 600000)
ISOLATION_LATENCY_MS = 30000

#: Broker answers after which Java retries on another broker.
RETRY_CODES = frozenset(
    {
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.NO_PERMISSION,
        ResponseCode.NO_BUYER_ID,
        ResponseCode.NOT_IN_CURRENT_UNIT,
        ResponseCode.SYSTEM_BUSY,
    }
)


def retryable(exc: BaseException) -> bool:
    """Whether a failed send attempt is tried again on another queue (as Java's producer)."""
    if isinstance(exc, api.BrokerError):
        return exc.code in RETRY_CODES
    return isinstance(exc, RemotingError | MQClientError)


class LatencyFaultTolerance:
    def __init__(
        self,
        latency_max_ms: Sequence[float] = LATENCY_MAX_MS,
        not_available_duration_ms: Sequence[float] = NOT_AVAILABLE_DURATION_MS,
    ) -> None:
        if len(latency_max_ms) != len(not_available_duration_ms):
            raise ValueError("latency_max_ms and not_available_duration_ms must have the same length")
        self._table = list(zip(latency_max_ms, not_available_duration_ms, strict=True))
        #: broker name -> when it is available again (monotonic seconds)
        self._available_at: dict[str, float] = {}

    def update(self, broker_name: str, latency_ms: float, isolation: bool) -> None:
        """Record a send's latency; ``isolation`` (the send failed) counts as 30 s of latency."""
        latency = ISOLATION_LATENCY_MS if isolation else latency_ms
        duration = 0.0
        for bound, avoid in reversed(self._table):
            if latency >= bound:
                duration = avoid
                break
        self._available_at[broker_name] = time.monotonic() + duration / 1000

    def available(self, broker_name: str) -> bool:
        return time.monotonic() >= self._available_at.get(broker_name, 0.0)

    def least_bad(self, broker_names: Sequence[str]) -> str | None:
        """When every broker is being avoided: the one whose avoidance ends first (Java pickOneAtLeast
        picks among the better half; the soonest-available one is the plain reading of that)."""
        known = [(self._available_at[name], name) for name in broker_names if name in self._available_at]
        return min(known)[1] if known else None
