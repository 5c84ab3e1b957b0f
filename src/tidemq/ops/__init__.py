"""The HTTP operations port (``tidemq server --http-port``): ``/metrics`` for Prometheus, and the place
other operator-facing web applications (the web console) are mounted.

The port serves what it is handed: the broker, nsqd and the store each define their Prometheus collectors
next to the state they read (``broker/metrics.py``, ``nsq/nsqd/metrics.py``, ``store/metrics.py``) and
``embedded.py`` passes them in. So this package imports none of ``broker/``, ``nsq/``, ``store/``, and a
scrape costs only what the collectors read at that moment: nothing is kept up to date between scrapes.
"""

from tidemq.ops.server import OpsConfig, OpsServer

__all__ = ["OpsConfig", "OpsServer"]
