"""nsqlookupd's registration DB (docs/protocols/nsq-lookupd.md#registration): which nsqd produces which topic
and channel.

Keys are ``(category, key, subkey)``; each holds producers by peer id. A producer is one peer's entry
under one key, so a tombstone marks a peer for one topic only. Time comes from an injected ``now`` so
the liveness rules can be tested without sleeping.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from tidemq.nsq.protocol import is_ephemeral

log = logging.getLogger(__name__)

CLIENT = "client"
TOPIC = "topic"
CHANNEL = "channel"
ANY = "*"


class Registration(NamedTuple):
    category: str
    key: str
    subkey: str

    def matches(self, category: str, key: str, subkey: str) -> bool:
        return (
            self.category == category
            and (key == ANY or self.key == key)
            and (subkey == ANY or self.subkey == subkey)
        )


CLIENT_KEY = Registration(CLIENT, "", "")


@dataclass(slots=True, eq=False)
class PeerInfo:
    """What an nsqd said about itself in IDENTIFY; shared by all its producer entries."""

    id: str
    remote_address: str
    hostname: str
    broadcast_address: str
    tcp_port: int
    http_port: int
    version: str
    last_update: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "remote_address": self.remote_address,
            "hostname": self.hostname,
            "broadcast_address": self.broadcast_address,
            "tcp_port": self.tcp_port,
            "http_port": self.http_port,
            "version": self.version,
        }


@dataclass(slots=True, eq=False)
class Producer:
    peer: PeerInfo
    tombstoned: bool = False
    tombstoned_at: float = 0.0


class RegistrationDB:
    def __init__(
        self,
        *,
        inactive_producer_timeout_s: float = 300.0,
        tombstone_lifetime_s: float = 45.0,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.inactive_producer_timeout_s = inactive_producer_timeout_s
        self.tombstone_lifetime_s = tombstone_lifetime_s
        self.now = now
        self._map: dict[Registration, dict[str, Producer]] = {}

    # --- primitives -----------------------------------------------------------------------------------

    def add_registration(self, reg: Registration) -> None:
        self._map.setdefault(reg, {})

    def remove_registration(self, reg: Registration) -> None:
        self._map.pop(reg, None)

    def add_producer(self, reg: Registration, peer: PeerInfo) -> bool:
        """Add ``peer`` under ``reg``; an existing entry (and its tombstone) is kept as it is."""
        producers = self._map.setdefault(reg, {})
        if peer.id in producers:
            return False
        producers[peer.id] = Producer(peer)
        return True

    def remove_producer(self, reg: Registration, peer_id: str) -> tuple[bool, int]:
        """Remove ``peer_id`` from ``reg`` (the key stays): whether it was there, and how many remain."""
        producers = self._map.get(reg)
        if producers is None:
            return False, 0
        removed = producers.pop(peer_id, None) is not None
        return removed, len(producers)

    def find_registrations(self, category: str, key: str, subkey: str) -> list[Registration]:
        if key != ANY and subkey != ANY:
            reg = Registration(category, key, subkey)
            return [reg] if reg in self._map else []
        return [reg for reg in self._map if reg.matches(category, key, subkey)]

    def find_producers(self, category: str, key: str, subkey: str) -> list[Producer]:
        seen: dict[str, Producer] = {}
        for reg in self.find_registrations(category, key, subkey):
            for peer_id, producer in self._map[reg].items():
                seen.setdefault(peer_id, producer)
        return list(seen.values())

    def lookup_registrations(self, peer_id: str) -> list[Registration]:
        return [reg for reg, producers in self._map.items() if peer_id in producers]

    def is_tombstoned(self, producer: Producer) -> bool:
        return producer.tombstoned and self.now() - producer.tombstoned_at < self.tombstone_lifetime_s

    def is_active(self, producer: Producer) -> bool:
        return self.now() - producer.peer.last_update <= self.inactive_producer_timeout_s

    # --- TCP protocol events --------------------------------------------------------------------------

    def identify(self, peer: PeerInfo) -> None:
        peer.last_update = self.now()
        self.add_producer(CLIENT_KEY, peer)
        log.info("lookupd: peer %s identified as %s:%d", peer.id, peer.broadcast_address, peer.tcp_port)

    def touch(self, peer: PeerInfo) -> None:
        peer.last_update = self.now()

    def register(self, peer: PeerInfo, topic: str, channel: str | None) -> None:
        if channel:
            self.add_producer(Registration(CHANNEL, topic, channel), peer)
        self.add_producer(Registration(TOPIC, topic, ""), peer)

    def unregister(self, peer: PeerInfo, topic: str, channel: str | None) -> None:
        """Ephemeral keys go once their last producer has; durable keys stay until deleted over HTTP."""
        if channel:
            reg = Registration(CHANNEL, topic, channel)
            _, left = self.remove_producer(reg, peer.id)
            if left == 0 and is_ephemeral(channel):
                self.remove_registration(reg)
            return
        for reg in self.find_registrations(CHANNEL, topic, ANY):
            removed, left = self.remove_producer(reg, peer.id)
            if removed:
                log.warning(
                    "lookupd: peer %s unregistered %s while it still had channel %s",
                    peer.id,
                    topic,
                    reg.subkey,
                )
            if left == 0 and is_ephemeral(reg.subkey):
                self.remove_registration(reg)
        reg = Registration(TOPIC, topic, "")
        _, left = self.remove_producer(reg, peer.id)
        if left == 0 and is_ephemeral(topic):
            self.remove_registration(reg)

    def disconnect(self, peer_id: str) -> None:
        """A closed connection takes its peer out of every key; the keys themselves stay listed."""
        for reg in self.lookup_registrations(peer_id):
            self.remove_producer(reg, peer_id)

    # --- HTTP administration --------------------------------------------------------------------------

    def create_topic(self, topic: str) -> None:
        self.add_registration(Registration(TOPIC, topic, ""))

    def delete_topic(self, topic: str) -> None:
        for reg in self.find_registrations(CHANNEL, topic, ANY):
            self.remove_registration(reg)
        self.remove_registration(Registration(TOPIC, topic, ""))

    def create_channel(self, topic: str, channel: str) -> None:
        self.add_registration(Registration(CHANNEL, topic, channel))
        self.add_registration(Registration(TOPIC, topic, ""))

    def delete_channel(self, topic: str, channel: str) -> bool:
        reg = Registration(CHANNEL, topic, channel)
        if reg not in self._map:
            return False
        self.remove_registration(reg)
        return True

    def tombstone(self, topic: str, node: str) -> int:
        """Tombstone the producers of ``topic`` whose ``broadcast_address:http_port`` is ``node``."""
        count = 0
        for producer in self.find_producers(TOPIC, topic, ""):
            peer = producer.peer
            if f"{peer.broadcast_address}:{peer.http_port}" == node:
                producer.tombstoned, producer.tombstoned_at = True, self.now()
                count += 1
        return count

    # --- queries --------------------------------------------------------------------------------------

    def topics(self) -> list[str]:
        return [reg.key for reg in self.find_registrations(TOPIC, ANY, "")]

    def channels(self, topic: str) -> list[str]:
        return [reg.subkey for reg in self.find_registrations(CHANNEL, topic, ANY)]

    def lookup(self, topic: str) -> tuple[list[str], list[PeerInfo]] | None:
        """Channels and live, non-tombstoned producers of ``topic``; None if lookupd never heard of it."""
        if Registration(TOPIC, topic, "") not in self._map:
            return None
        producers = [
            p.peer
            for p in self.find_producers(TOPIC, topic, "")
            if self.is_active(p) and not self.is_tombstoned(p)
        ]
        return self.channels(topic), producers

    def nodes(self) -> list[dict[str, Any]]:
        """Live nsqd (tombstoned ones included), each with its topics and a tombstone flag per topic."""
        out = []
        for client in self.find_producers(CLIENT, "", ""):
            if not self.is_active(client):
                continue
            peer = client.peer
            topics = [reg.key for reg in self.lookup_registrations(peer.id) if reg.category == TOPIC]
            tombstones = []
            for topic in topics:
                entry = self._map.get(Registration(TOPIC, topic, ""), {}).get(peer.id)
                tombstones.append(entry is not None and self.is_tombstoned(entry))
            out.append({**peer.to_json(), "tombstones": tombstones, "topics": topics})
        return out

    def debug(self) -> dict[str, list[dict[str, Any]]]:
        """``/debug``: keys in sorted order at both levels, as Go encodes nsqlookupd's maps."""
        out: dict[str, list[dict[str, Any]]] = {}
        for reg, producers in self._map.items():
            for producer in producers.values():
                peer = producer.peer
                entry = {
                    "id": peer.id,
                    "hostname": peer.hostname,
                    "broadcast_address": peer.broadcast_address,
                    "tcp_port": peer.tcp_port,
                    "http_port": peer.http_port,
                    "version": peer.version,
                    "last_update": int(peer.last_update * 1e9),
                    "tombstoned": producer.tombstoned,
                    "tombstoned_at": int(producer.tombstoned_at * 1e9),
                }
                key = f"{reg.category}:{reg.key}:{reg.subkey}"
                out.setdefault(key, []).append(dict(sorted(entry.items())))
        return dict(sorted(out.items()))
