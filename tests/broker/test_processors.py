"""Broker request processors called directly with a decoded command, on a store in a temp dir (no socket).

The end-to-end tests (``test_broker_*.py``) check the same answers over the wire; these pin the rules of
each processor where a failure names the function at fault.
"""

from __future__ import annotations

from pathlib import Path

from tests.broker.processor_support import Peer, broker_on, call
from tidemq.broker.processors import admin, consumer, send
from tidemq.client import api
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.headers import SendMessageRequestHeader


def send_request(topic: str, queue_id: int, body: bytes) -> RemotingCommand:
    header = SendMessageRequestHeader(
        producer_group="PG",
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=0,
        flag=0,
    )
    return api.send_request(header, body)


def queue_request(code: int, topic: str, queue_id: int, **ext: str) -> RemotingCommand:
    return RemotingCommand(code, ext_fields={"topic": topic, "queueId": str(queue_id), **ext})


async def test_create_topic_takes_its_queue_counts_and_refuses_system_names_and_bad_counts(
    tmp_path: Path,
) -> None:
    async with broker_on(tmp_path) as broker:
        ok = await call(admin.create_topic, broker, api.create_topic_request("Orders", 3))
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        config = broker.topics.table.get("Orders")
        assert config is not None
        assert (config.read_queue_nums, config.write_queue_nums) == (3, 3)

        clash = await call(admin.create_topic, broker, api.create_topic_request("SCHEDULE_TOPIC_XXXX"))
        assert clash.code == ResponseCode.SYSTEM_ERROR and "conflict with system topic" in (
            clash.remark or ""
        )
        too_many = await call(admin.create_topic, broker, api.create_topic_request("Wide", 1025))
        assert too_many.code == ResponseCode.SYSTEM_ERROR
        assert "between 1 and 1024" in (too_many.remark or "")
        bad_name = await call(admin.create_topic, broker, api.create_topic_request("no spaces"))
        assert bad_name.code == ResponseCode.SYSTEM_ERROR
        assert broker.topics.table.get("Wide") is None and broker.topics.table.get("no spaces") is None


async def test_sent_messages_move_the_queue_offsets(tmp_path: Path) -> None:
    async with broker_on(tmp_path) as broker:
        await call(admin.create_topic, broker, api.create_topic_request("Offsets", 2))
        for body in (b"one", b"two", b"three"):
            sent = await call(send.send_message, broker, send_request("Offsets", 1, body))
            assert sent.code == ResponseCode.SUCCESS, sent.remark
        assert sent.ext_fields["queueId"] == "1" and sent.ext_fields["queueOffset"] == "2"
        top = await call(consumer.max_offset, broker, queue_request(RequestCode.GET_MAX_OFFSET, "Offsets", 1))
        low = await call(consumer.min_offset, broker, queue_request(RequestCode.GET_MIN_OFFSET, "Offsets", 1))
        assert (low.ext_fields["offset"], top.ext_fields["offset"]) == ("0", "3")
        empty = await call(
            consumer.max_offset, broker, queue_request(RequestCode.GET_MAX_OFFSET, "Offsets", 0)
        )
        assert empty.ext_fields["offset"] == "0"


async def test_a_committed_offset_is_answered_back_and_minus_one_is_not_a_commit(tmp_path: Path) -> None:
    async with broker_on(tmp_path) as broker:
        await call(admin.create_topic, broker, api.create_topic_request("Commits", 1))

        def commit(offset: int) -> RemotingCommand:
            return queue_request(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                "Commits",
                0,
                consumerGroup="G",
                commitOffset=str(offset),
            )

        query = queue_request(RequestCode.QUERY_CONSUMER_OFFSET, "Commits", 0, consumerGroup="G")
        assert (await call(consumer.update_offset, broker, commit(5))).code == ResponseCode.SUCCESS
        assert (await call(consumer.query_offset, broker, query)).ext_fields["offset"] == "5"
        assert (await call(consumer.update_offset, broker, commit(-1))).code == ResponseCode.SUCCESS
        assert (await call(consumer.query_offset, broker, query)).ext_fields["offset"] == "5"


async def test_a_heartbeat_needs_a_client_id_and_creates_the_groups_retry_topic(tmp_path: Path) -> None:
    async with broker_on(tmp_path) as broker:
        nobody = RemotingCommand(RequestCode.HEART_BEAT, body=b'{"consumerDataSet": []}')
        refused = await call(consumer.heart_beat, broker, nobody)
        assert refused.code == ResponseCode.SYSTEM_ERROR and "clientID" in (refused.remark or "")

        beat = RemotingCommand(
            RequestCode.HEART_BEAT,
            body=b'{"clientID": "127.0.0.1@1", "consumerDataSet": [{"groupName": "HB",'
            b' "messageModel": "CLUSTERING", "subscriptionDataSet": []}]}',
        )
        member = Peer()
        assert (await call(consumer.heart_beat, broker, beat, member)).code == ResponseCode.SUCCESS
        assert [c.code for c in member.told] == [RequestCode.NOTIFY_CONSUMER_IDS_CHANGED], "a new member"
        assert broker.topics.table.get("%RETRY%HB") is not None
        listed = await call(
            consumer.consumer_list,
            broker,
            RemotingCommand(RequestCode.GET_CONSUMER_LIST_BY_GROUP, ext_fields={"consumerGroup": "HB"}),
        )
        assert listed.code == ResponseCode.SUCCESS and b"127.0.0.1@1" in bytes(listed.body)
