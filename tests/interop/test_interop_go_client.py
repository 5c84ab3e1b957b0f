"""rocketmq-client-go v2.1.2 (the Go client, pinned by interop/rocketmq-go/go.sum) against ``tidemq server``:
its producer and push consumer, with messages crossing both ways between it and tidemq's own clients.

``make rocketmq-go-client`` builds the peer into ``.cache/rocketmq-go-client/peer``; each run does one
role and prints JSON lines (see tests.support.run_script); one tidemq server serves the whole module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.consumer_support import drain
from tests.interop.test_interop_java_client import dead_letters, send_ok_and_poison
from tests.support import ScriptRun, ServerProcess, create_topic, run, run_script, unique
from tidemq.client import Message, Producer

pytestmark = [pytest.mark.e2e, pytest.mark.go_client]
PEER = Path(__file__).resolve().parents[2] / ".cache" / "rocketmq-go-client" / "peer"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path_factory.mktemp("go-client") / "data").start()
    yield srv
    srv.stop()


def go(server: ServerProcess, command: str, timeout: int = 60, **options: object) -> ScriptRun:
    if not PEER.exists():
        pytest.fail(f"the Go test peer is missing ({PEER}): run `make rocketmq-go-client`")
    result = run_script([str(PEER), command, "--namesrv", server.namesrv], timeout, **options)
    assert result.rc == 0, result.describe()
    return result


def events(result: ScriptRun, event: str) -> list[dict[str, Any]]:
    return [r for r in result.records if r.get("event") == event]


def test_go_producer_every_send_mode_is_consumed_by_tidemq(server: ServerProcess) -> None:
    topic = unique("GoSends")
    run(create_topic(server.broker, topic))
    modes = "sync,async,oneway,batch,ordered,delay"
    produced = go(server, "produce", topic=topic, mode=modes, count=4, shards=2, tag="TagG")
    sent = events(produced, "sent")
    assert len(sent) == 5 * 4 + 1, produced.describe()  # a batch answers once for its 4 messages
    got = run(drain(server.namesrv, topic, 24))
    by_body = {m.body.decode(): m for m in got}
    assert sorted(by_body) == sorted(f"{mode}-{i}" for mode in modes.split(",") for i in range(4))
    assert len(got) == 24
    for s in sent:
        if s["mode"] in ("sync", "async", "ordered", "delay"):
            m = by_body[s["body"]]
            assert m.msg_id == s["msgId"], s
            if s["mode"] != "delay":  # a delayed message is stored again when due, at a new offset
                assert m.offset_msg_id == s["offsetMsgId"], s
            assert m.tags == "TagG" and m.properties["KEYS"] == f"gk-{s['index']}"
            assert m.properties["idx"] == str(s["index"])
        if s["mode"] in ("sync", "ordered"):
            m = by_body[s["body"]]
            assert (m.queue_id, m.queue_offset) == (s["queueId"], s["queueOffset"]), s
    batch = next(s for s in sent if s["mode"] == "batch")
    assert len(batch["offsetMsgId"].split(",")) == 4
    ordered = [s for s in sent if s["mode"] == "ordered"]
    for shard in (0, 1):
        mine = [s for s in ordered if s["index"] % 2 == shard]
        assert len({s["queueId"] for s in mine}) == 1
        assert [s["queueOffset"] for s in mine] == sorted(s["queueOffset"] for s in mine)
    for i in range(4):
        m = by_body[f"delay-{i}"]
        assert m.topic == topic and m.store_timestamp - m.born_timestamp >= 900


def test_tidemq_messages_reach_a_go_push_consumer_through_retry_to_the_dlq(server: ServerProcess) -> None:
    topic, group = unique("ToGo"), unique("GoPush")
    run(create_topic(server.broker, topic))

    run(send_ok_and_poison(server.namesrv, topic))
    consumed = go(
        server,
        "consume",
        topic=topic,
        group=group,
        mode="concurrent",
        fail_first=100,
        fail_match="poison",
        max_reconsume=2,
        expect_deliveries=4 + 3,
    )
    got = events(consumed, "received")
    ok = {r["body"]: r for r in got if r["body"].startswith("ok-")}
    assert sorted(ok) == [f"ok-{i}" for i in range(4)]
    assert (
        ok["ok-2"]["properties"]["n"] == "2" and ok["ok-2"]["keys"] == "k2" and ok["ok-2"]["tags"] == "TagA"
    )
    poison = [r for r in got if r["body"] == "poison-0"]
    assert [r["reconsumeTimes"] for r in poison] == [0, 1, 2], poison
    assert all(r["topic"] == topic for r in poison)
    assert poison[1]["properties"]["RETRY_TOPIC"] == topic
    dead = run(dead_letters(server, f"%DLQ%{group}"))
    assert [m.body for m in dead] == [b"poison-0"]
    assert dead[0].properties["KEYS"] == "kp"


def test_go_orderly_and_broadcasting_consumers(server: ServerProcess) -> None:
    topic = unique("OrderToGo")
    run(create_topic(server.broker, topic))

    async def produce() -> None:
        async with Producer(unique("PG"), server.namesrv) as producer:
            for i in range(12):
                await producer.send(Message(topic, b"m-%d" % i), sharding_key=f"key-{i % 3}")

    run(produce())
    orderly = go(server, "consume", topic=topic, group=unique("GoOrderly"), mode="orderly", expect=12)
    by_key: dict[int, list[str]] = {}
    for r in events(orderly, "received"):
        by_key.setdefault(int(r["body"].rsplit("-", 1)[1]) % 3, []).append(r["body"])
    assert by_key == {k: [f"m-{i}" for i in range(12) if i % 3 == k] for k in range(3)}

    bcast = go(
        server, "consume", topic=topic, group=unique("GoBcast"), mode="broadcast", instances=2, expect=12
    )
    seen: dict[str, set[str]] = {}
    for r in events(bcast, "received"):
        seen.setdefault(r["instance"], set()).add(r["body"])
    assert len(seen) == 2 and all(bodies == {f"m-{i}" for i in range(12)} for bodies in seen.values())
