"""Send ``PREFIX-0``, ``PREFIX-1``, ... with the official RocketMQ 5.x Python SDK until STOP_FILE exists,
printing one JSON line per send ({"ok": true, "body": ...} once acknowledged). The chaos suite runs it as a
subprocess (see tests/grpc/sdk_producer.py for why) while it SIGKILLs the server: failures are printed
and sending goes on; a startup that fails (the server is down) is retried.

    python sdk_load_producer.py ENDPOINT TOPIC PREFIX STOP_FILE
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from typing import Any

from rocketmq import ClientConfiguration, Credentials, Message, Producer


def started(endpoint: str, topic: str, stop_file: str) -> Any:
    while not os.path.exists(stop_file):
        producer = Producer(ClientConfiguration(endpoint, Credentials("", "")), (topic,))
        try:
            producer.startup()
            return producer
        except Exception:
            time.sleep(0.5)
    return None


def main() -> None:
    endpoint, topic, prefix, stop_file = sys.argv[1:5]
    producer = started(endpoint, topic, stop_file)
    if producer is None:
        return
    n = 0
    try:
        while not os.path.exists(stop_file):
            body = f"{prefix}-{n}"
            n += 1
            msg = Message()
            msg.topic = topic
            msg.body = body.encode()
            try:
                producer.send(msg)
                print(json.dumps({"ok": True, "body": body}))
            except Exception as exc:
                print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}))
                time.sleep(0.1)
            sys.stdout.flush()
    finally:
        with contextlib.suppress(Exception):
            producer.shutdown()


if __name__ == "__main__":
    main()
