"""``tidemq server`` serves the console at ``/`` of its operations port (``--http-port``), beside
``/metrics``: the pages reach the server's own front-ends at the ports they got."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from tests.support import ServerProcess, create_topic, unique

pytestmark = pytest.mark.e2e


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def test_the_server_port_serves_the_console_and_metrics(server: ServerProcess) -> None:
    topic = unique("ConsoleOnServer")
    await create_topic(server.broker, topic, queues=3)
    base = f"http://{server.http}"
    status, page = _get(base + "/")
    assert status == 200 and "Overview" in page, page[:2000]
    status, page = _get(base + "/topics")
    assert status == 200 and topic in page
    status, page = _get(f"{base}/topics/{topic}")
    assert status == 200 and page.count("<tr") >= 4, "one row per queue under a header"
    status, page = _get(base + "/nsq")
    assert status == 200
    status, page = _get(base + "/topics/NoSuchTopicHere")
    assert status == 404 and "NoSuchTopicHere" in page
    status, text = _get(base + "/metrics")
    assert status == 200 and f'topic="{topic}"' in text
