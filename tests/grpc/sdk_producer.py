"""Send messages with the official RocketMQ 5.x Python SDK (rocketmq-python-client) and print the receipts
as JSON lines: run as a subprocess by the gRPC tests, because the SDK registers its own copy of the
``apache.rocketmq.v2`` protobuf types, which cannot share a process with tidemq.grpc's.

    python sdk_producer.py ENDPOINT TOPIC SPEC_JSON   # SPEC_JSON: a list of messages to send
"""

from __future__ import annotations

import json
import os
import sys
import time

from rocketmq import ClientConfiguration, Credentials, Message, Producer


def main() -> None:
    endpoint, topic, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    credentials = Credentials(os.environ.get("SDK_AK", ""), os.environ.get("SDK_SK", ""))  # ACL tests
    producer = Producer(ClientConfiguration(endpoint, credentials), (topic,))
    producer.startup()
    try:
        for item in spec:
            msg = Message()
            msg.topic = topic
            msg.body = item["body"].encode()
            if "tag" in item:
                msg.tag = item["tag"]
            if "key" in item:
                msg.keys = item["key"]  # the SDK's setter takes one key per assignment
            if "group" in item:
                msg.message_group = item["group"]
            if "deliver_at_s" in item:
                msg.delivery_timestamp = item["deliver_at_s"]  # the SDK's unit: epoch seconds
            for key, value in item.get("props", {}).items():
                msg.add_property(key, value)
            try:
                receipt = producer.send(msg)
                print(
                    json.dumps(
                        {"ok": True, "message_id": receipt.message_id, "sent_ms": int(time.time() * 1000)}
                    )
                )
            except Exception as exc:
                print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}))
            sys.stdout.flush()
    finally:
        producer.shutdown()


if __name__ == "__main__":
    main()
