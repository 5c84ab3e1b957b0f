"""The operations HTTP server: an aiohttp application serving ``/metrics``, with room for more apps."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)


@dataclass(slots=True)
class OpsConfig:
    host: str
    port: int = 8080
    #: The application served at ``/`` on this port (the web console, from its own factory): ``/metrics``
    #: is added to its router, so its middlewares, error pages and start-up hooks apply to the whole port.
    #: aiohttp cannot mount a sub-application at ``/`` beside other routes, hence this shape.
    root_app: web.Application | None = None


class ConnectionsCollector(Collector):
    """``tidemq_open_connections{port=...}``: each front-end's open connections, counted at scrape time
    by the function ``embedded.py`` hands in for it."""

    def __init__(self, counts: Mapping[str, Callable[[], int]]) -> None:
        self.counts = counts

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "tidemq_open_connections", "Open client connections, per front-end port.", labels=("port",)
        )
        for name, count in self.counts.items():
            family.add_metric([name], count())
        yield family


class OpsServer:
    """``/metrics`` from ``collectors`` (and the process's RSS, CPU and open files) beside
    ``config.root_app``'s routes. The collectors are called at every scrape."""

    def __init__(self, config: OpsConfig, collectors: Iterable[Collector]) -> None:
        self.config = config
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)  # process_resident_memory_bytes, process_open_fds, ...
        for collector in collectors:
            self.registry.register(collector)
        self.app = build_app(self.registry, config.root_app)
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self.port = config.port

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, self.config.host, self.config.port)
        await self._site.start()
        server = self._site._server  # the bound port, when 0 asked for a free one
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        log.info("operations HTTP on %s:%d (/metrics)", self.config.host, self.port)

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def build_app(registry: CollectorRegistry, root_app: web.Application | None = None) -> web.Application:
    """``root_app`` (or an empty application) with ``GET /metrics`` added; any other path is its own or
    a 404."""
    app = root_app if root_app is not None else web.Application()

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=render(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.router.add_get("/metrics", metrics)
    return app


class _One:
    """One family, in the shape ``generate_latest`` reads (anything with ``collect``)."""

    def __init__(self, metric: Metric) -> None:
        self.metric = metric

    def collect(self) -> list[Metric]:
        return [self.metric]


def render(registry: CollectorRegistry) -> bytes:
    """The registry in the text format. A family that carries ``rendered_text`` (tidemq/exposition.py:
    the per-queue families, thousands of samples) is written as is; prometheus-client formats the rest."""
    out: list[bytes] = []
    for metric in registry.collect():
        text = getattr(metric, "rendered_text", None)
        if isinstance(text, str):
            out.append(text.encode())
        else:
            out.append(generate_latest(_One(metric)))
    return b"".join(out)
