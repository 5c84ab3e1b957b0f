"""Receive and acknowledge with the official RocketMQ 5.x Python SDK's SimpleConsumer until STOP_FILE exists,
printing each received body as a JSON line (before its ack: delivery is what at-least-once promises). The
chaos suite runs it as a subprocess (see tests/grpc/sdk_producer.py for why) while it SIGKILLs the server:
errors are retried, and so is a startup that fails because the server is down.

    python sdk_load_consumer.py ENDPOINT GROUP TOPIC STOP_FILE
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from typing import Any

from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer


def started(endpoint: str, group: str, topic: str, stop_file: str) -> Any:
    while not os.path.exists(stop_file):
        consumer = SimpleConsumer(
            ClientConfiguration(endpoint, Credentials("", "")),
            group,
            {topic: FilterExpression("*")},
            await_duration=2,
        )
        try:
            consumer.startup()
            return consumer
        except Exception:
            time.sleep(0.5)
    return None


def main() -> None:
    endpoint, group, topic, stop_file = sys.argv[1:5]
    consumer = started(endpoint, group, topic, stop_file)
    if consumer is None:
        return
    try:
        while not os.path.exists(stop_file):
            try:
                messages = consumer.receive(32, 10) or []
            except Exception:
                time.sleep(0.2)
                continue
            for msg in messages:
                print(json.dumps({"body": msg.body.decode()}), flush=True)
                with contextlib.suppress(Exception):  # unacknowledged: it comes back, counted as duplicate
                    consumer.ack(msg)
    finally:
        with contextlib.suppress(Exception):
            consumer.shutdown()


if __name__ == "__main__":
    main()
