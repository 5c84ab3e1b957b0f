"""QueryRoute's and QueryAssignment's queues for one topic of this broker (Java proxy RouteActivity).

A topic's queues split as the proxy splits them: ``min(read, write)`` READ_WRITE queues, the rest READ or
WRITE only, one NONE queue for a topic with neither permission. Every queue accepts the topic's
``message.type`` (grpc/message_types.py).
"""

from __future__ import annotations

from tidemq.grpc.message_types import ALL_TYPES
from tidemq.grpc.proto import definition_pb2 as pb

PERM_WRITE = 0x2
PERM_READ = 0x4


def permission(perm: int) -> pb.Permission:
    readable, writable = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
    if readable and writable:
        return pb.READ_WRITE
    if readable:
        return pb.READ
    return pb.WRITE if writable else pb.NONE


def broker_of(name: str, endpoints: pb.Endpoints) -> pb.Broker:
    """The broker as a 5.x client sees it: this server's gRPC endpoints, master id 0."""
    return pb.Broker(name=name, id=0, endpoints=endpoints)


def route_queues(
    topic: pb.Resource,
    perm: int,
    read_queues: int,
    write_queues: int,
    broker: pb.Broker,
    accepted: tuple[pb.MessageType, ...] = ALL_TYPES,
) -> list[pb.MessageQueue]:
    readable, writable = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
    r = w = rw = n = 0
    if readable and writable:
        rw = min(read_queues, write_queues)
        r, w = read_queues - rw, write_queues - rw
    elif writable:
        w = write_queues
    elif readable:
        r = read_queues
    else:
        n = max(1, read_queues, write_queues)
    kinds = [pb.READ] * r + [pb.WRITE] * w + [pb.READ_WRITE] * rw + [pb.NONE] * n
    return [
        pb.MessageQueue(topic=topic, id=i, permission=kind, broker=broker, accept_message_types=accepted)
        for i, kind in enumerate(kinds)
    ]


def assignments(
    topic: pb.Resource, perm: int, read_queues: int, broker: pb.Broker, fifo: bool
) -> list[pb.Assignment]:
    """A non-FIFO group gets the whole topic as one queue (id -1: the server picks the queue per
    receive); a FIFO group every readable queue, so each is received in order."""
    if not perm & PERM_READ or read_queues <= 0:
        return []
    ids = range(read_queues) if fifo else (-1,)
    return [
        pb.Assignment(
            message_queue=pb.MessageQueue(topic=topic, id=i, permission=permission(perm), broker=broker)
        )
        for i in ids
    ]


def answer_endpoints(requested: pb.Endpoints, fallback_host: str, port: int) -> pb.Endpoints:
    """The endpoints the client used (its access point), each on this server's gRPC port, as the proxy
    answers by default (useEndpointPortFromRequest=false)."""
    addresses = [pb.Address(host=a.host, port=port) for a in requested.addresses]
    if not addresses:
        addresses = [pb.Address(host=fallback_host, port=port)]
    scheme = requested.scheme or pb.IPv4
    return pb.Endpoints(scheme=scheme, addresses=addresses)
