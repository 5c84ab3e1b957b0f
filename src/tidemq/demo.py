"""``make quickstart``: start ``tidemq server``, push a few thousand messages through it, summarise, stop.

Run as ``python -m tidemq.demo``. Everything it writes goes under ``var/quickstart/``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson

from tidemq.client import api
from tidemq.remoting.message import BatchItem, encode_properties
from tidemq.remoting.transport import connect

OUT_DIR = Path("var/quickstart")
TOPIC = "QuickstartOrders"
QUEUES = 4
BATCHES = 100
BATCH_SIZE = 32
SINGLE_SENDS = 800
CATEGORIES = ("books", "garden", "games", "kitchen", "music")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _order(i: int) -> tuple[bytes, str]:
    category = CATEGORIES[i % len(CATEGORIES)]
    event = {
        "order_id": i,
        "user": f"user-{i % 97}",
        "category": category,
        "amount": round(5 + (i * 37 % 500) / 3, 2),
    }
    return orjson.dumps(event), category


def start_server(data_dir: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    ns_port, broker_port = _free_port(), _free_port()
    log = open(OUT_DIR / "server.log", "wb")  # noqa: SIM115 - owned by the child process
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tidemq",
            "server",
            "--data-dir",
            str(data_dir),
            "--namesrv-port",
            str(ns_port),
            "--broker-port",
            str(broker_port),
            "--nsqd-tcp-port",
            "0",
            "--nsqd-http-port",
            "0",
            "--lookupd-tcp-port",
            "0",
            "--lookupd-http-port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=log,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if not line.startswith("tidemq ready"):
        proc.kill()
        raise SystemExit(f"server failed to start; see {OUT_DIR / 'server.log'}")
    return proc, f"127.0.0.1:{ns_port}", f"127.0.0.1:{broker_port}"


async def exercise(namesrv: str, broker: str) -> dict[str, float]:
    host, port = broker.rsplit(":", 1)
    conn = await connect(host, int(port))
    await api.create_topic(conn, TOPIC, QUEUES)
    ns_host, ns_port = namesrv.rsplit(":", 1)
    ns = await connect(ns_host, int(ns_port))
    route = await api.get_route(ns, TOPIC)
    ns.close()
    assert route is not None, "topic has no route"

    started = time.perf_counter()
    sent = 0
    for b in range(BATCHES):
        items = []
        for i in range(BATCH_SIZE):
            body, category = _order(sent + i)
            items.append(
                BatchItem(0, body, encode_properties({"TAGS": category, "KEYS": f"order-{sent + i}"}))
            )
        await api.send_batch(conn, TOPIC, items, queue_id=b % QUEUES)
        sent += BATCH_SIZE
    batch_secs = time.perf_counter() - started

    started = time.perf_counter()
    pending = []
    for i in range(SINGLE_SENDS):
        body, category = _order(sent + i)
        props = {"TAGS": category, "KEYS": f"order-{sent + i}"}
        pending.append(api.send_message(conn, TOPIC, body, queue_id=i % QUEUES, properties=props))
        if len(pending) == 16:
            await asyncio.gather(*pending)
            pending.clear()
    await asyncio.gather(*pending)
    sent += SINGLE_SENDS
    single_secs = time.perf_counter() - started

    started = time.perf_counter()
    received = 0
    per_category: dict[str, int] = {}
    for queue_id in range(QUEUES):
        offset = 0
        while True:
            result = await api.pull_message(conn, "QuickstartReader", TOPIC, queue_id, offset)
            if not result.messages:
                break
            for msg in result.messages:
                per_category[msg.tags or "-"] = per_category.get(msg.tags or "-", 0) + 1
            received += len(result.messages)
            offset = result.next_begin_offset
    pull_secs = time.perf_counter() - started
    only_books = 0
    for queue_id in range(QUEUES):
        result = await api.pull_message(conn, "QuickstartReader", TOPIC, queue_id, 0, expression="books")
        only_books += sum(1 for m in result.messages if m.tags == "books")
    conn.close()
    if received != sent:
        raise SystemExit(f"sent {sent} messages but read back {received}")
    return {
        "sent": sent,
        "received": received,
        "batch_rate": BATCHES * BATCH_SIZE / batch_secs,
        "single_rate": SINGLE_SENDS / single_secs,
        "pull_rate": received / pull_secs,
        **{f"cat:{k}": v for k, v in sorted(per_category.items())},
        "books_filtered": only_books,
    }


def main() -> None:
    if OUT_DIR.exists():
        shutil.rmtree(OUT_DIR)
    OUT_DIR.mkdir(parents=True)
    data_dir = OUT_DIR / "data"
    proc, namesrv, broker = start_server(data_dir)
    try:
        stats = asyncio.run(exercise(namesrv, broker))
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        code = proc.wait(30)
    if code != 0:
        raise SystemExit(f"server exited with {code}; see {OUT_DIR / 'server.log'}")
    rows = [
        ("name server / broker", f"{namesrv} / {broker}"),
        ("messages sent", f"{stats['sent']:.0f} (batches of {BATCH_SIZE} + {SINGLE_SENDS} single sends)"),
        ("messages pulled back", f"{stats['received']:.0f}, every one accounted for"),
        ("batch send", f"{stats['batch_rate']:,.0f} msg/s"),
        ("single send, 16 in flight", f"{stats['single_rate']:,.0f} msg/s"),
        ("pull, 32 per request", f"{stats['pull_rate']:,.0f} msg/s"),
        ("per category", ", ".join(f"{k[4:]} {v:.0f}" for k, v in stats.items() if k.startswith("cat:"))),
        ("first pull with tag filter 'books'", f"{stats['books_filtered']:.0f} books messages"),
        ("data and server log", str(OUT_DIR)),
        ("server shutdown", "clean (exit 0)"),
    ]
    width = max(len(k) for k, _ in rows)
    print("tidemq quickstart")
    for key, value in rows:
        print(f"  {key.ljust(width)}  {value}")


if __name__ == "__main__":
    main()
