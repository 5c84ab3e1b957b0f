"""Allocation strategies (spec 5.7) against hand-computed Java results, plus partition properties."""

from __future__ import annotations

import hashlib
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.client.allocate import (
    AllocateStrategy,
    Averagely,
    AveragelyByCircle,
    ByConfig,
    ByMachineRoom,
    ConsistentHash,
    MachineRoomNearby,
    java_md5_hash,
)
from tidemq.client.message_queue import MessageQueue, java_string_key


def mqs(n: int, topic: str = "T", broker: str = "broker-a") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, i) for i in range(n)]


def cids(c: int) -> list[str]:
    return [f"10.0.0.{i}@{1000 + i}" for i in range(c)]


def shares(strategy: AllocateStrategy, mq_all: list[MessageQueue], cid_all: list[str]) -> list[list[int]]:
    return [[mq.queue_id for mq in strategy.allocate("G", cid, mq_all, cid_all)] for cid in cid_all]


# --- MessageQueue -------------------------------------------------------------------------------------


def test_message_queue_str_is_java_to_string() -> None:
    assert (
        str(MessageQueue("TopicA", "broker-a", 3))
        == "MessageQueue [topic=TopicA, brokerName=broker-a, queueId=3]"
    )


def test_message_queue_json_round_trip() -> None:
    mq = MessageQueue("T", "b", 7)
    assert mq.to_json() == {"topic": "T", "brokerName": "b", "queueId": 7}
    assert MessageQueue.from_json(mq.to_json()) == mq
    assert MessageQueue.from_json({"topic": "T", "brokerName": "b", "queueId": "7"}) == mq


@pytest.mark.parametrize(
    "bad",
    [
        {"topic": "T", "brokerName": "b"},
        {"topic": 1, "brokerName": "b", "queueId": 0},
        {"topic": "T", "brokerName": "b", "queueId": True},
        {"topic": "T", "brokerName": "b", "queueId": "x"},
        {"topic": "T", "brokerName": "b", "queueId": 1.5},
    ],
)
def test_message_queue_from_json_rejects_bad_objects(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        MessageQueue.from_json(bad)


def test_message_queue_is_a_value_whose_pickle_holds_only_its_fields() -> None:
    """Its hash is worked out once; a pickle must not carry it, as a string hashes differently in the
    process that loads it."""
    mq = MessageQueue("T", "broker-a", 3)
    assert mq == MessageQueue("T", "broker-a", 3) and hash(mq) == hash(MessageQueue("T", "broker-a", 3))
    assert {mq: 1}[MessageQueue("T", "broker-a", 3)] == 1 and mq != MessageQueue("T", "broker-a", 4)
    object.__setattr__(mq, "_hash", 0)  # as if worked out in a process whose strings hash otherwise
    loaded = pickle.loads(pickle.dumps(mq))
    assert loaded == mq and hash(loaded) == hash(MessageQueue("T", "broker-a", 3)) != 0
    assert repr(mq) == "MessageQueue(topic='T', broker_name='broker-a', queue_id=3)"


def test_message_queue_order_is_topic_broker_queue() -> None:
    unsorted = [
        MessageQueue("B", "a", 0),
        MessageQueue("A", "b", 1),
        MessageQueue("A", "b", 0),
        MessageQueue("A", "a", 10),
        MessageQueue("A", "a", 2),
    ]
    assert sorted(unsorted) == [
        MessageQueue("A", "a", 2),
        MessageQueue("A", "a", 10),
        MessageQueue("A", "b", 0),
        MessageQueue("A", "b", 1),
        MessageQueue("B", "a", 0),
    ]
    assert MessageQueue("A", "a", 1) <= MessageQueue("A", "a", 1) < MessageQueue("A", "a", 2)


def test_java_string_order_uses_utf16_code_units() -> None:
    # U+1F600 is the surrogate pair D83D DE00 in UTF-16, which sorts below U+FF5E in Java.
    emoji, fullwidth = "\U0001f600", "\uff5e"
    assert emoji > fullwidth  # Python: code points
    assert java_string_key(emoji) < java_string_key(fullwidth)  # Java: code units
    assert MessageQueue(emoji, "b", 0) < MessageQueue(fullwidth, "b", 0)
    # Prefixes sort first; ASCII upper case before lower case.
    assert sorted(["ab", "a", "B", "b"], key=java_string_key) == ["B", "a", "ab", "b"]


# --- argument checks shared with Java -----------------------------------------------------------------

CHECKED: list[AllocateStrategy] = [
    Averagely(),
    AveragelyByCircle(),
    ConsistentHash(),
    MachineRoomNearby(Averagely(), lambda mq: "r", lambda cid: "r"),
]


@pytest.mark.parametrize("strategy", CHECKED, ids=lambda s: s.name)
def test_empty_inputs_raise_like_java(strategy: AllocateStrategy) -> None:
    with pytest.raises(ValueError, match="currentCID is empty"):
        strategy.allocate("G", "", mqs(2), ["a"])
    with pytest.raises(ValueError, match="mqAll is null or mqAll empty"):
        strategy.allocate("G", "a", [], ["a"])
    with pytest.raises(ValueError, match="cidAll is null or cidAll empty"):
        strategy.allocate("G", "a", mqs(2), [])


@pytest.mark.parametrize("strategy", [*CHECKED, ByMachineRoom({"r"})], ids=lambda s: s.name)
def test_unknown_consumer_gets_nothing(strategy: AllocateStrategy) -> None:
    assert strategy.allocate("G", "stranger", mqs(4, broker="r@b"), ["a", "b"]) == []


# --- Averagely ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "c", "expected"),
    [
        (8, 3, [[0, 1, 2], [3, 4, 5], [6, 7]]),  # n % c = 2: first two consumers get one more
        (7, 3, [[0, 1, 2], [3, 4], [5, 6]]),  # n % c = 1
        (6, 3, [[0, 1], [2, 3], [4, 5]]),  # even split
        (4, 4, [[0], [1], [2], [3]]),  # n == c
        (2, 3, [[0], [1], []]),  # n < c: the last consumer idles
        (1, 4, [[0], [], [], []]),
        (5, 1, [[0, 1, 2, 3, 4]]),
    ],
)
def test_averagely_exact(n: int, c: int, expected: list[list[int]]) -> None:
    assert shares(Averagely(), mqs(n), cids(c)) == expected


def test_averagely_keeps_mq_all_order_across_brokers() -> None:
    mq_all = mqs(2, broker="a") + mqs(2, broker="b")
    assert Averagely().allocate("G", "c1", mq_all, ["c0", "c1"]) == mq_all[2:]


# --- Averagely by circle ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "c", "expected"),
    [
        (8, 3, [[0, 3, 6], [1, 4, 7], [2, 5]]),
        (4, 4, [[0], [1], [2], [3]]),
        (2, 3, [[0], [1], []]),
    ],
)
def test_averagely_by_circle_exact(n: int, c: int, expected: list[list[int]]) -> None:
    assert shares(AveragelyByCircle(), mqs(n), cids(c)) == expected


# --- Consistent hash ----------------------------------------------------------------------------------


def reference_md5(key: str) -> int:
    """Java MD5Hash written out longhand: h = (h << 8) | (digest[i] & 0xFF) for i in 0..3."""
    digest = hashlib.md5(key.encode("utf-8")).digest()
    h = 0
    for i in range(4):
        h = (h << 8) | digest[i]
    return h


def reference_consistent_hash(
    mq_all: list[MessageQueue], cid_all: list[str], vnodes: int = 10
) -> dict[str, list[MessageQueue]]:
    """Independent model of ConsistentHashRouter: a linear scan for the smallest node hash ≥ queue hash."""
    ring: dict[int, str] = {}
    for cid in cid_all:
        for k in range(vnodes):
            ring[reference_md5(cid + "-" + str(k))] = cid
    owners: dict[str, list[MessageQueue]] = {cid: [] for cid in cid_all}
    for mq in mq_all:
        h = reference_md5(
            f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"
        )
        at_or_after = [node for node in ring if node >= h]
        node = min(at_or_after) if at_or_after else min(ring)
        owners[ring[node]].append(mq)
    return owners


def test_java_md5_hash_known_values() -> None:
    # md5("") = d41d8cd98f00b204e9800998ecf8427e, md5("a") = 0cc175b9c0f1b6a831c399e269772661
    assert java_md5_hash("") == 0xD41D8CD9
    assert java_md5_hash("a") == 0x0CC175B9
    assert java_md5_hash("10.0.0.1@1001-3") == reference_md5("10.0.0.1@1001-3")


def test_consistent_hash_matches_java_algorithm() -> None:
    mq_all = mqs(4, topic="TopicTest", broker="broker-a") + mqs(4, topic="TopicTest", broker="broker-b")
    cid_all = ["192.168.0.1@100", "192.168.0.2@200", "192.168.0.3@300"]
    expected = reference_consistent_hash(mq_all, cid_all)
    got = {cid: ConsistentHash().allocate("G", cid, mq_all, cid_all) for cid in cid_all}
    assert got == expected
    # Pinned (checked once against the same algorithm run on a JDK 17 JVM) so a change to both model
    # and implementation cannot slip through; Java's ring really leaves the first consumer idle here.
    pinned = {cid: [(mq.broker_name[-1], mq.queue_id) for mq in share] for cid, share in got.items()}
    assert pinned == PINNED_CONSISTENT_HASH


PINNED_CONSISTENT_HASH: dict[str, list[tuple[str, int]]] = {
    "192.168.0.1@100": [],
    "192.168.0.2@200": [("a", 0), ("a", 1), ("a", 3), ("b", 0), ("b", 2), ("b", 3)],
    "192.168.0.3@300": [("a", 2), ("b", 1)],
}


def test_consistent_hash_virtual_node_count() -> None:
    mq_all = mqs(16)
    cid_all = cids(3)
    for vnodes in (1, 3, 50):
        got = {cid: ConsistentHash(vnodes).allocate("G", cid, mq_all, cid_all) for cid in cid_all}
        assert got == reference_consistent_hash(mq_all, cid_all, vnodes)
    assert ConsistentHash(0).allocate("G", "a", mq_all, ["a"]) == []
    with pytest.raises(ValueError, match="illegal virtualNodeCnt :-1"):
        ConsistentHash(-1)


def test_consistent_hash_ring_collision_later_node_wins() -> None:
    # A hash function colliding everything: Java's TreeMap.put keeps the last node put.
    strategy = ConsistentHash(2, hash_function=lambda key: 0)
    assert strategy.allocate("G", "b", mqs(3), ["a", "b"]) == mqs(3)
    assert strategy.allocate("G", "a", mqs(3), ["a", "b"]) == []


def test_consistent_hash_utf8_keys() -> None:
    cid = "caf\u00e9\U0001f600@1"
    assert java_md5_hash(cid) == int.from_bytes(hashlib.md5(cid.encode()).digest()[:4], "big")
    assert java_md5_hash(cid) == 1847874696  # value printed by a JDK 17 JVM
    # A lone surrogate becomes '?' as in Java's String.getBytes().
    assert java_md5_hash("x\ud800") == java_md5_hash("x?")


# --- By config ----------------------------------------------------------------------------------------


def test_by_config_returns_configured_queues_whatever_the_group() -> None:
    fixed = [MessageQueue("T", "b", 5), MessageQueue("T", "b", 1)]
    strategy = ByConfig(fixed)
    assert strategy.name == "CONFIG"
    assert strategy.allocate("G", "anyone", mqs(2), ["x"]) == fixed
    assert strategy.allocate("G", "", [], []) == fixed


# --- By machine room ----------------------------------------------------------------------------------


def test_by_machine_room_exact() -> None:
    mq_all = (
        mqs(3, broker="hz@broker-a")  # kept
        + mqs(2, broker="sh@broker-b")  # other room
        + mqs(2, broker="broker-c")  # no room
        + mqs(2, broker="hz@x@y")  # three parts: not a room name
        + mqs(2, broker="hz@broker-d")  # kept
    )
    kept = mq_all[:3] + mq_all[9:]  # 5 queues among 2 consumers: per = 2, rem = 1
    strategy = ByMachineRoom({"hz"})
    assert strategy.allocate("G", "c0", mq_all, ["c0", "c1"]) == [kept[0], kept[1], kept[4]]
    assert strategy.allocate("G", "c1", mq_all, ["c0", "c1"]) == [kept[2], kept[3]]


def test_by_machine_room_java_split_drops_trailing_empties() -> None:
    # Java "hz@b@".split("@") is ["hz", "b"]; "hz@".split("@") is ["hz"].
    mq_all = [MessageQueue("T", "hz@b@", 0), MessageQueue("T", "hz@", 0)]
    assert ByMachineRoom({"hz"}).allocate("G", "c", mq_all, ["c"]) == mq_all[:1]


def test_by_machine_room_fewer_queues_than_consumers() -> None:
    mq_all = mqs(2, broker="hz@a")
    cid_all = ["c0", "c1", "c2"]
    assert shares(ByMachineRoom({"hz"}), mq_all, cid_all) == [[0], [1], []]


# --- Machine room nearby ------------------------------------------------------------------------------


def test_machine_room_nearby_exact() -> None:
    mq_all = mqs(4, broker="hz-broker") + mqs(4, broker="sh-broker") + mqs(2, broker="bj-broker")
    cid_all = ["hz-c0", "hz-c1", "sh-c0"]
    strategy = MachineRoomNearby(
        Averagely(), lambda mq: mq.broker_name.split("-")[0], lambda cid: cid.split("-")[0]
    )
    assert strategy.name == "MACHINE_ROOM_NEARBY-AVG"
    got = {
        cid: [(mq.broker_name[:2], mq.queue_id) for mq in strategy.allocate("G", cid, mq_all, cid_all)]
        for cid in cid_all
    }
    # hz queues split between the two hz consumers, sh queues all to sh-c0, and bj (no consumer)
    # shared averagely by all three: one each for the first two.
    assert got == {
        "hz-c0": [("hz", 0), ("hz", 1), ("bj", 0)],
        "hz-c1": [("hz", 2), ("hz", 3), ("bj", 1)],
        "sh-c0": [("sh", 0), ("sh", 1), ("sh", 2), ("sh", 3)],
    }


def test_machine_room_nearby_orphan_rooms_in_java_string_order() -> None:
    mq_all = [MessageQueue("T", "z", 0), MessageQueue("T", "a", 0), MessageQueue("T", "m", 0)]
    strategy = MachineRoomNearby(AveragelyByCircle(), lambda mq: mq.broker_name, lambda cid: "home")
    assert [mq.broker_name for mq in strategy.allocate("G", "c", mq_all, ["c"])] == ["a", "m", "z"]


def test_machine_room_nearby_rejects_empty_rooms() -> None:
    with pytest.raises(ValueError, match="Machine room is null for mq MessageQueue"):
        MachineRoomNearby(Averagely(), lambda mq: "", lambda cid: "r").allocate("G", "c", mqs(1), ["c"])
    with pytest.raises(ValueError, match="Machine room is null for consumer id c"):
        MachineRoomNearby(Averagely(), lambda mq: "r", lambda cid: "").allocate("G", "c", mqs(1), ["c"])


# --- properties ---------------------------------------------------------------------------------------

queue_lists = st.lists(
    st.builds(
        MessageQueue,
        st.sampled_from(["T", "%RETRY%G", "T\U0001f600"]),
        st.sampled_from(["broker-a", "broker-b", "hz@b"]),
        st.integers(0, 63),
    ),
    min_size=1,
    max_size=40,
    unique=True,
).map(sorted)
client_lists = st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=12, unique=True).map(
    lambda cs: sorted(cs, key=java_string_key)
)


@pytest.mark.parametrize(
    "strategy", [Averagely(), AveragelyByCircle(), ConsistentHash(), ConsistentHash(1)], ids=lambda s: s.name
)
@given(mq_all=queue_lists, cid_all=client_lists)
def test_every_queue_goes_to_exactly_one_consumer(
    strategy: AllocateStrategy, mq_all: list[MessageQueue], cid_all: list[str]
) -> None:
    assigned = [mq for cid in cid_all for mq in strategy.allocate("G", cid, mq_all, cid_all)]
    assert sorted(assigned) == mq_all


@given(mq_all=queue_lists, cid_all=client_lists)
def test_averagely_shares_differ_by_at_most_one(mq_all: list[MessageQueue], cid_all: list[str]) -> None:
    sizes = [len(Averagely().allocate("G", cid, mq_all, cid_all)) for cid in cid_all]
    assert max(sizes) - min(sizes) <= 1
    # The larger shares go to the first consumers.
    assert sizes == sorted(sizes, reverse=True)


@given(mq_all=queue_lists, cid_all=client_lists)
def test_consistent_hash_matches_reference_model(mq_all: list[MessageQueue], cid_all: list[str]) -> None:
    # Clients from st.text may hold lone surrogates, which the plain-UTF-8 model cannot encode.
    cid_all = [cid for cid in cid_all if not any("\ud800" <= ch <= "\udfff" for ch in cid)] or ["c"]
    expected = reference_consistent_hash(mq_all, cid_all)
    assert {cid: ConsistentHash().allocate("G", cid, mq_all, cid_all) for cid in cid_all} == expected


@given(mq_all=queue_lists, cid_all=client_lists)
def test_by_machine_room_partitions_the_room_queues(mq_all: list[MessageQueue], cid_all: list[str]) -> None:
    assigned = [mq for cid in cid_all for mq in ByMachineRoom({"hz"}).allocate("G", cid, mq_all, cid_all)]
    assert sorted(assigned) == [mq for mq in mq_all if mq.broker_name == "hz@b"]
