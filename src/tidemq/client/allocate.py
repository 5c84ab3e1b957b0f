"""Queue allocation strategies for clustering consumers (docs/protocols/rocketmq-consumption.md#allocation;
Java ``consumer/rebalance/*``).

Every consumer of a group runs the same strategy on the same sorted ``mq_all`` / ``cid_all`` and keeps
only its own share, so the shares must partition the queues without any coordination. That is why
each algorithm here reproduces Java's arithmetic exactly: a tidemq consumer must agree with Java
consumers sitting in the same group.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Iterable
from typing import Protocol

from tidemq.client.message_queue import MessageQueue, java_string_key

__all__ = [
    "AllocateStrategy",
    "Averagely",
    "AveragelyByCircle",
    "ByConfig",
    "ByMachineRoom",
    "ConsistentHash",
    "MachineRoomNearby",
    "java_md5_hash",
]


class AllocateStrategy(Protocol):
    """Java ``AllocateMessageQueueStrategy``: pick ``current_cid``'s share of ``mq_all``."""

    @property
    def name(self) -> str: ...

    def allocate(
        self, group: str, current_cid: str, mq_all: list[MessageQueue], cid_all: list[str]
    ) -> list[MessageQueue]: ...


def _check_args(current_cid: str, mq_all: list[MessageQueue], cid_all: list[str]) -> bool:
    """Java's common preamble: reject empty inputs; ``False`` if the caller is not in ``cid_all``.

    Java only logs "[BUG] ... not in cidAll" and returns an empty list in that case: the consumer
    list is fetched from a broker and may lag behind this client's own registration.
    """
    if not current_cid:
        raise ValueError("currentCID is empty")
    if not mq_all:
        raise ValueError("mqAll is null or mqAll empty")
    if not cid_all:
        raise ValueError("cidAll is null or cidAll empty")
    return current_cid in cid_all


class Averagely:
    """``AllocateMessageQueueAveragely`` (the default everywhere): contiguous blocks, sizes differ by ≤1.

    The first ``n % c`` consumers get one extra queue; with fewer queues than consumers the first
    ``n`` consumers get one queue each and the rest get none.
    """

    name = "AVG"

    def allocate(
        self, group: str, current_cid: str, mq_all: list[MessageQueue], cid_all: list[str]
    ) -> list[MessageQueue]:
        if not _check_args(current_cid, mq_all, cid_all):
            return []
        index = cid_all.index(current_cid)
        n, c = len(mq_all), len(cid_all)
        mod = n % c
        extra = mod > 0 and index < mod
        average = 1 if n <= c else n // c + (1 if extra else 0)
        start = index * average if extra else index * average + mod
        count = min(average, n - start)
        return [mq_all[(start + i) % n] for i in range(count)]


class AveragelyByCircle:
    """``AllocateMessageQueueAveragelyByCircle``: deal queues round-robin (``index``, ``index + c``, …).

    Spreads each broker's queues across consumers instead of giving one consumer a whole broker.
    """

    name = "AVG_BY_CIRCLE"

    def allocate(
        self, group: str, current_cid: str, mq_all: list[MessageQueue], cid_all: list[str]
    ) -> list[MessageQueue]:
        if not _check_args(current_cid, mq_all, cid_all):
            return []
        index = cid_all.index(current_cid)
        return mq_all[index :: len(cid_all)]


def _java_utf8(s: str) -> bytes:
    """``String.getBytes()`` with Java's (Linux, JDK 18+) default UTF-8 charset.

    Java sees surrogate pairs as one character and writes ``?`` for a lone surrogate; joining pairs
    through UTF-16 first and encoding with ``replace`` (which also emits ``?``) does the same.
    """
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:
        joined = s.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "surrogatepass")
        return joined.encode("utf-8", "replace")


def java_md5_hash(key: str) -> int:
    """``ConsistentHashRouter.MD5Hash``: the first 4 MD5 digest bytes as an unsigned big-endian int."""
    return int.from_bytes(hashlib.md5(_java_utf8(key)).digest()[:4], "big")


class ConsistentHash:
    """``AllocateMessageQueueConsistentHash``: a hash ring, so membership changes move few queues.

    Ring: for each cid in ``cid_all`` order, virtual nodes ``f"{cid}-{k}"`` hashed with
    :func:`java_md5_hash`; a later node replaces an earlier one on a hash collision (Java ``TreeMap.put``).
    A queue belongs to the first node whose hash is ≥ ``hash(str(mq))``, wrapping to the lowest.
    Shares are uneven by design. Go's client uses a CRC32 ring and cannot share a group with Java.
    """

    name = "CONSISTENT_HASH"

    def __init__(self, virtual_nodes: int = 10, hash_function: Callable[[str], int] | None = None) -> None:
        if virtual_nodes < 0:
            raise ValueError(f"illegal virtualNodeCnt :{virtual_nodes}")
        self.virtual_nodes = virtual_nodes
        self.hash_function = hash_function or java_md5_hash

    def ring(self, cid_all: Iterable[str]) -> tuple[list[int], list[str]]:
        """The ring as parallel sorted lists (node hashes, owning cids)."""
        nodes: dict[int, str] = {}
        seen: set[str] = set()
        for cid in cid_all:
            # Java numbers a re-added node's replicas after those already on the ring.
            existing = sum(1 for owner in nodes.values() if owner == cid) if cid in seen else 0
            seen.add(cid)
            for k in range(self.virtual_nodes):
                nodes[self.hash_function(f"{cid}-{k + existing}")] = cid
        hashes = sorted(nodes)
        return hashes, [nodes[h] for h in hashes]

    def allocate(
        self, group: str, current_cid: str, mq_all: list[MessageQueue], cid_all: list[str]
    ) -> list[MessageQueue]:
        if not _check_args(current_cid, mq_all, cid_all):
            return []
        hashes, owners = self.ring(cid_all)
        if not hashes:  # virtual_nodes == 0: Java's router routes nothing
            return []
        result = []
        for mq in mq_all:
            pos = bisect.bisect_left(hashes, self.hash_function(str(mq)))
            if owners[pos % len(hashes)] == current_cid:
                result.append(mq)
        return result


class ByConfig:
    """``AllocateMessageQueueByConfig``: a fixed, configured list, whatever the group looks like.

    Java does no validation here; the caller is responsible for not overlapping other consumers.
    """

    name = "CONFIG"

    def __init__(self, queues: Iterable[MessageQueue]) -> None:
        self.queues: tuple[MessageQueue, ...] = tuple(queues)

    def allocate(
        self, group: str, current_cid: str, mq_all: list[MessageQueue], cid_all: list[str]
    ) -> list[MessageQueue]:
        return list(self.queues)


def _java_split_at(s: str) -> list[str]:
    """Java ``s.split("@")``: like ``str.split`` but trailing empty strings are removed."""
    parts = s.split("@")
    if len(parts) == 1:
        return parts  # no separator: Java returns the whole string, even when it is empty
    while parts and parts[-1] == "":
        parts.pop()
    return parts


class ByMachineRoom:
    """``AllocateMessageQueueByMachineRoom``: consume only brokers named ``room@name`` in our rooms.

    The kept queues are shared averagely, the remainder dealt one each to the first consumers. Like
    Java this does not reject empty inputs: it just returns no queues (``cid_all`` empty or the
    consumer absent) or none to share (``mq_all`` empty).
    """

    name = "MACHINE_ROOM"

    def __init__(self, consumer_idcs: Iterable[str]) -> None:
        self.consumer_idcs: frozenset[str] = frozenset(consumer_idcs)

    def allocate(
        self, group: str, current_cid: str, mq_all: list[MessageQueue], cid_all: list[str]
    ) -> list[MessageQueue]:
        if current_cid not in cid_all:
            return []
        index = cid_all.index(current_cid)
        kept = []
        for mq in mq_all:
            parts = _java_split_at(mq.broker_name)
            if len(parts) == 2 and parts[0] in self.consumer_idcs:
                kept.append(mq)
        c = len(cid_all)
        per, rem = divmod(len(kept), c)
        result = kept[index * per : index * per + per]
        if rem > index:
            result.append(kept[index + per * c])
        return result


class MachineRoomNearby:
    """``AllocateMachineRoomNearby``: prefer queues of brokers in the consumer's own machine room.

    Each room's queues go (through ``inner``) to that room's consumers; queues of rooms with no live
    consumer are shared by all consumers. ``resolver`` gives a queue's broker room, ``client_room`` a
    client id's room; an empty room is an error, as in Java. ``name`` is Java's
    ``"MACHINE_ROOM_NEARBY-" + inner name``.
    """

    def __init__(
        self,
        inner: AllocateStrategy,
        resolver: Callable[[MessageQueue], str],
        client_room: Callable[[str], str],
    ) -> None:
        self.inner = inner
        self.resolver = resolver
        self.client_room = client_room

    @property
    def name(self) -> str:
        return f"MACHINE_ROOM_NEARBY-{self.inner.name}"

    def allocate(
        self, group: str, current_cid: str, mq_all: list[MessageQueue], cid_all: list[str]
    ) -> list[MessageQueue]:
        if not _check_args(current_cid, mq_all, cid_all):
            return []
        room_queues: dict[str, list[MessageQueue]] = {}
        for mq in mq_all:
            room = self.resolver(mq)
            if not room:
                raise ValueError(f"Machine room is null for mq {mq}")
            room_queues.setdefault(room, []).append(mq)
        room_clients: dict[str, list[str]] = {}
        for cid in cid_all:
            room = self.client_room(cid)
            if not room:
                raise ValueError(f"Machine room is null for consumer id {cid}")
            room_clients.setdefault(room, []).append(cid)

        result: list[MessageQueue] = []
        my_room = self.client_room(current_cid)
        mine = room_queues.pop(my_room, None)
        if mine:
            result.extend(self.inner.allocate(group, current_cid, mine, room_clients.get(my_room, [])))
        # Java iterates a TreeMap, so rooms come in Java String order.
        for room in sorted(room_queues, key=java_string_key):
            if room not in room_clients:
                result.extend(self.inner.allocate(group, current_cid, room_queues[room], cid_all))
        return result
