"""The pull settings push and lite pull consumers both take reach their core as given, and both public
constructors still name every one of them with the type ``PullSettings`` declares."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest

from tidemq.client.allocate import AveragelyByCircle
from tidemq.client.consumer.core import PullSettings
from tidemq.client.consumer.lite_pull import LitePullConsumer
from tidemq.client.consumer.push import PushConsumer
from tidemq.client.consumer.types import ConsumeFromWhere, MessageModel

ConsumerClass = type[PushConsumer] | type[LitePullConsumer]


@pytest.mark.parametrize("cls", [PushConsumer, LitePullConsumer])
def test_each_constructor_takes_every_pull_setting_by_keyword_with_its_type(cls: ConsumerClass) -> None:
    parameters = inspect.signature(cls.__init__).parameters
    for field in dataclasses.fields(PullSettings):
        parameter = parameters[field.name]
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY
        assert parameter.annotation == field.type


@pytest.mark.parametrize("cls", [PushConsumer, LitePullConsumer])
def test_the_settings_given_to_a_consumer_are_its_cores(cls: ConsumerClass, tmp_path: Path) -> None:
    allocate = AveragelyByCircle()
    consumer = cls(
        "SettingsGroup",
        "127.0.0.1:1",
        message_model=MessageModel.BROADCASTING,
        consume_from_where=ConsumeFromWhere.TIMESTAMP,
        consume_timestamp="20240102030405",
        allocate=allocate,
        pull_batch_size=7,
        pull_threshold_for_queue=70,
        pull_threshold_size_for_queue_mib=3,
        consume_concurrently_max_span=9,
        suspend_timeout_ms=1234,
        post_subscription_when_pull=True,
        offset_store_dir=tmp_path,
        consume_thread_max=2,
    )
    core = consumer.core
    try:
        assert core.message_model is MessageModel.BROADCASTING
        assert core.consume_from_where is ConsumeFromWhere.TIMESTAMP
        assert core.consume_timestamp == "20240102030405"
        assert core.allocate is allocate
        assert core.pull_batch_size == 7
        assert core.pull_threshold_for_queue == 70
        assert core.pull_threshold_size_for_queue == 3 * 1024 * 1024
        assert core.consume_concurrently_max_span == 9
        assert core.suspend_timeout_ms == 1234
        assert core.post_subscription_when_pull is True
        assert core.offset_store_dir == tmp_path
        assert core.consume_thread_max == 2
    finally:
        if isinstance(consumer, PushConsumer):
            consumer.executor.shutdown()


def test_push_and_lite_pull_keep_their_own_defaults() -> None:
    push = PushConsumer("DefaultsPush", "127.0.0.1:1")
    pull = LitePullConsumer("DefaultsPull", "127.0.0.1:1")
    push.executor.shutdown()
    assert (push.core.pull_batch_size, push.core.suspend_timeout_ms) == (32, 15_000)
    assert (pull.core.pull_batch_size, pull.core.suspend_timeout_ms) == (10, 20_000)
    for core in (push.core, pull.core):
        assert core.message_model is MessageModel.CLUSTERING
        assert core.consume_from_where is ConsumeFromWhere.LAST_OFFSET
        assert core.pull_threshold_size_for_queue == 100 * 1024 * 1024
