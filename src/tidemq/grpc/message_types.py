"""Topic message types on the gRPC endpoint, as the 5.x proxy applies them: a route's queues accept the
topic's ``message.type``, and a send whose message is of another type is refused with
MESSAGE_PROPERTY_CONFLICT_WITH_TYPE before anything is stored.

A message's type comes from what it carries, in the proxy's order (TopicMessageType.parseFromMessageProperty):
a transaction half message, then a delivery time, then a message group, else NORMAL; the ``message_type``
field the client fills is not what is checked. A topic without the attribute (created by 4.x tools, NSQ or
auto-creation) accepts every type: a deliberate difference, the 5.x proxy reads a missing attribute as
NORMAL (docs/protocols/rocketmq-grpc.md#topic-message-types).
"""

from __future__ import annotations

from tidemq.broker.topic_attributes import DELAY, FIFO, MIXED, NORMAL, TRANSACTION, UNSPECIFIED
from tidemq.grpc.proto import definition_pb2 as pb
from tidemq.grpc.status import Code, GrpcStatusError

ALL_TYPES = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)
_BY_NAME = {NORMAL: pb.NORMAL, FIFO: pb.FIFO, DELAY: pb.DELAY, TRANSACTION: pb.TRANSACTION}


def accepted_types(topic_type: str | None) -> tuple[pb.MessageType, ...]:
    """``accept_message_types`` of the topic's queues."""
    if topic_type is None or topic_type == MIXED:
        return ALL_TYPES
    one = _BY_NAME.get(topic_type)
    return (one,) if one is not None else (pb.MESSAGE_TYPE_UNSPECIFIED,)


def type_of(msg: pb.Message) -> str:
    """The 5.x message type of what ``msg`` carries."""
    sp = msg.system_properties
    if sp.message_type == pb.TRANSACTION:
        return TRANSACTION
    if sp.HasField("delivery_timestamp"):
        return DELAY
    if sp.message_group:
        return FIFO
    return NORMAL


def check_type(topic_type: str | None, msg: pb.Message) -> None:
    """Refuse ``msg`` on a topic of another type; ``topic_type`` None means the topic accepts any."""
    if topic_type is None:
        return
    actual = type_of(msg)
    if actual != topic_type and topic_type != MIXED:
        raise GrpcStatusError(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"TopicMessageType validate failed, the expected type is {topic_type}, "
            f"but actual type is {actual}",
        )


def unknown_topic_refusal(msg: pb.Message) -> GrpcStatusError:
    """What the proxy answers a send to a topic that does not exist: the type check against UNSPECIFIED
    fails before any route lookup."""
    return GrpcStatusError(
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        f"TopicMessageType validate failed, the expected type is {UNSPECIFIED}, "
        f"but actual type is {type_of(msg)}",
    )
