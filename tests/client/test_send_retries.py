"""The producer's retry loop, shared by single and batch sends, driven by a scripted attempt (no broker)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from tidemq.client import api
from tidemq.client.instance import MQClientError
from tidemq.client.message import SendResult, SendStatus
from tidemq.client.message_queue import MessageQueue
from tidemq.client.producer import Producer
from tidemq.remoting.codes import ResponseCode

QUEUES = [MessageQueue("T", broker, 0) for broker in ("broker-a", "broker-b")]


def _ok(mq: MessageQueue) -> SendResult:
    return SendResult(SendStatus.SEND_OK, "id", "offset-id", mq, 0)


class _Script:
    """An attempt that raises the scripted errors in order, then succeeds; it records the queues tried."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.tried: list[MessageQueue] = []

    async def __call__(self, mq: MessageQueue) -> SendResult:
        self.tried.append(mq)
        if self.errors:
            raise self.errors.pop(0)
        return _ok(mq)


def _send(
    producer: Producer, script: _Script, *, queue: MessageQueue | None = None, warn: bool
) -> SendResult:
    deadline = time.monotonic() + 5
    return asyncio.run(
        producer._send_retrying(
            script, QUEUES, deadline, None, queue=queue, kind="send", topic="T", warn_on_retry=warn
        )
    )


def test_a_failed_attempt_is_retried_on_another_broker() -> None:
    script = _Script(MQClientError("down"))
    result = _send(Producer(retry_times=2), script, warn=True)
    assert len(script.tried) == 2 and script.tried[0].broker_name != script.tried[1].broker_name
    assert result.message_queue == script.tried[1]


def test_retries_stop_after_retry_times_with_the_count_and_last_error() -> None:
    script = _Script(*(MQClientError(f"down {i}") for i in range(5)))
    with pytest.raises(MQClientError, match=r"send to 'T' failed after 3 attempts: down 2"):
        _send(Producer(retry_times=2), script, warn=True)
    assert len(script.tried) == 3


def test_a_broker_code_not_worth_retrying_is_raised_at_once() -> None:
    script = _Script(api.BrokerError(ResponseCode.MESSAGE_ILLEGAL, "bad"))
    with pytest.raises(api.BrokerError):
        _send(Producer(retry_times=2), script, warn=True)
    assert len(script.tried) == 1


def test_a_given_queue_gets_one_attempt() -> None:
    script = _Script(MQClientError("down"))
    with pytest.raises(MQClientError, match=r"failed after 1 attempt: down"):
        _send(Producer(retry_times=2), script, queue=QUEUES[1], warn=False)
    assert script.tried == [QUEUES[1]]


@pytest.mark.parametrize("warn", [True, False])
def test_only_single_sends_warn_of_a_retry(warn: bool, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="tidemq.client.producer")
    _send(Producer(retry_times=1), _Script(MQClientError("down")), warn=warn)
    assert any("retrying on another queue" in r.getMessage() for r in caplog.records) is warn
