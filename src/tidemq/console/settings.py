"""Where the console finds the cluster it shows."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    """``namesrv`` is a RocketMQ name server (host:port, ``;``-separated for several); ``nsqd_http`` and
    ``lookupd_http`` are HTTP addresses, None to hide the NSQ page's parts. ``sample_seconds`` is how often
    the overview samples the brokers' put/get totals for its TPS chart; ``acl`` asks for an admin account
    (access key and secret key) before any page, else the console asks once a broker refuses an unsigned
    call. ``open_paths`` are path prefixes the login gate, sessions and CSRF check leave alone: the
    routes another component adds when the console is the root application of a port (``/metrics``)."""

    namesrv: str
    nsqd_http: str | None = None
    lookupd_http: str | None = None
    sample_seconds: float = 5.0
    samples_kept: int = 120
    acl: bool = False
    open_paths: tuple[str, ...] = ("/metrics",)
