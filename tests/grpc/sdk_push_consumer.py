"""Run the official RocketMQ 5.x Python SDK's PushConsumer (rocketmq-python-client) for a test: a
listener that answers FAILURE for the first ``FAIL_ATTEMPTS`` deliveries of a message whose body starts
with "fail", SUCCESS otherwise; one JSON line per delivery on stdout; shuts down when ``EXPECT``
successes were seen or after ``SECONDS`` (run as a subprocess, see sdk_producer.py).

    python sdk_push_consumer.py ENDPOINT GROUP TOPIC EXPECT FAIL_ATTEMPTS SECONDS SLEEP_S
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    MessageListener,
    PushConsumer,
)


class Listener(MessageListener):  # type: ignore[misc]
    def __init__(self, fail_attempts: int, sleep_s: float, expect: int) -> None:
        self.fail_attempts = fail_attempts
        self.sleep_s = sleep_s
        self.expect = expect
        self.successes: set[str] = set()
        self.done = threading.Event()
        self.lock = threading.Lock()

    def consume(self, message: Any) -> Any:
        body = message.body.decode()
        fail = body.startswith("fail") and message.delivery_attempt <= self.fail_attempts
        if self.sleep_s and message.delivery_attempt == 1:
            time.sleep(self.sleep_s)
        with self.lock:
            line = {"body": body, "attempt": message.delivery_attempt, "failed": fail, "at": time.time()}
            print(json.dumps(line), flush=True)
            if not fail:
                self.successes.add(body)
                if len(self.successes) >= self.expect:
                    self.done.set()
        return ConsumeResult.FAILURE if fail else ConsumeResult.SUCCESS


def main() -> None:
    endpoint, group, topic, expect, fail_attempts, seconds, sleep_s = sys.argv[1:8]
    listener = Listener(int(fail_attempts), float(sleep_s), int(expect))
    consumer = PushConsumer(
        ClientConfiguration(endpoint, Credentials()), group, listener, {topic: FilterExpression()}
    )
    consumer.startup()
    print(json.dumps({"ready": True}), flush=True)
    try:
        listener.done.wait(float(seconds))
        time.sleep(1)  # let the last acks go out
    finally:
        consumer.shutdown()


if __name__ == "__main__":
    main()
