"""Transactions with the official RocketMQ 5.x Python SDK (rocketmq-python-client), run as a subprocess by
the gRPC tests (the SDK's protobuf types cannot share a process with tidemq.grpc's). Prints JSON lines.

    python sdk_transaction.py ENDPOINT TOPIC MODE [BODY] [WAIT_S]
      commit | rollback   send a half message and decide it at once
      orphan              send a half message and die without deciding (os._exit, no goodbye)
      check-commit | check-rollback
                          send a half message (unless BODY is '-'), decide nothing, and answer the server's
                          back-checks with COMMIT/ROLLBACK for WAIT_S seconds
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    Credentials,
    Message,
    Producer,
    TransactionChecker,
    TransactionResolution,
)


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


class Checker(TransactionChecker):
    def __init__(self, resolution: int) -> None:
        self.resolution = resolution
        self.checked = threading.Event()

    def check(self, message: Message) -> int:
        emit(
            checked=message.message_id,
            body=message.body.decode(),
            topic=message.topic,
            tag=message.tag,
            props=dict(message.properties),
        )
        self.checked.set()
        return self.resolution


def main() -> None:
    endpoint, topic, mode = sys.argv[1:4]
    body = sys.argv[4] if len(sys.argv) > 4 else "tx"
    wait_s = float(sys.argv[5]) if len(sys.argv) > 5 else 30.0
    resolution = TransactionResolution.ROLLBACK if mode.endswith("rollback") else TransactionResolution.COMMIT
    checker = Checker(resolution)
    credentials = Credentials(os.environ.get("SDK_AK", ""), os.environ.get("SDK_SK", ""))
    producer = Producer(ClientConfiguration(endpoint, credentials), (topic,), checker)
    producer.startup()
    if body != "-":
        transaction = producer.begin_transaction()
        msg = Message()
        msg.topic = topic
        msg.body = body.encode()
        msg.tag = "TxTag"
        msg.add_property("order", "42")
        try:
            receipt = producer.send(msg, transaction)
            emit(ok=True, message_id=receipt.message_id, transaction_id=receipt.transaction_id)
            if mode == "commit":
                transaction.commit()
                emit(decided="commit")
            elif mode == "rollback":
                transaction.rollback()
                emit(decided="rollback")
        except Exception as exc:
            emit(ok=False, error=f"{type(exc).__name__}: {exc}")
    if mode == "orphan":
        os._exit(0)
    if mode.startswith("check"):
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and not checker.checked.is_set():
            time.sleep(0.1)
        time.sleep(1.0)  # the checker's EndTransaction goes out on the SDK's executor
    producer.shutdown()


if __name__ == "__main__":
    main()
