"""Where an nsqd client connection is in its life, beside the protocol ``State`` (verbs.py) that /stats shows.

The protocol state says which verbs a client may send; the lifecycle says whether the connection still
reads commands and takes messages at all. nsqd closes a connection on a fatal error, two missed
heartbeats or a corrupt compressed stream; with sync flush its last frames may be held until a FIN
before them is durable (connection.py's module docstring), and the socket then closes only once those
frames are written.

The worker (the task that runs what may wait) has one state the inline path must see: whether it waits
for the fsync that answers stored publishes (``Writer``).
"""

from __future__ import annotations

import enum

from tidemq.nsq.transitions import Transitions


class Lifecycle(enum.Enum):
    #: Reading commands; while SUBSCRIBED, taking messages.
    OPEN = "open"
    #: Closed by nsqd while its last frames wait for a FIN to be durable: nothing more is read or
    #: delivered, and the socket closes once those frames are written.
    CLOSE_PENDING = "close pending"
    #: Nothing more is read or delivered; the socket is closed (or closes once its buffer is written).
    CLOSED = "closed"


class Event(enum.Enum):
    #: nsqd closes the connection and no output is held.
    CLOSE = "close"
    #: nsqd closes the connection while output waits for a FIN to be durable.
    CLOSE_HELD = "close with output held"
    #: The held output was written.
    RELEASED = "held output written"
    #: The socket is gone (asyncio's ``connection_lost``).
    LOST = "lost"


_L, _E = Lifecycle, Event

#: Every move. Closing again after CLOSED changes nothing: the socket was closed already.
TRANSITIONS = Transitions(
    "nsqd connection",
    {
        (_L.OPEN, _E.CLOSE): _L.CLOSED,
        (_L.OPEN, _E.CLOSE_HELD): _L.CLOSE_PENDING,
        (_L.OPEN, _E.LOST): _L.CLOSED,
        (_L.CLOSE_PENDING, _E.CLOSE): _L.CLOSED,
        (_L.CLOSE_PENDING, _E.CLOSE_HELD): _L.CLOSE_PENDING,
        (_L.CLOSE_PENDING, _E.RELEASED): _L.CLOSED,
        (_L.CLOSE_PENDING, _E.LOST): _L.CLOSED,
        (_L.CLOSED, _E.CLOSE): _L.CLOSED,
        (_L.CLOSED, _E.CLOSE_HELD): _L.CLOSED,
        (_L.CLOSED, _E.LOST): _L.CLOSED,
    },
)


class Writer(enum.Enum):
    """Sync flush: whether the worker holds answers (OK) until an fsync covers the publishes they answer.

    While it waits, publishes that arrive are still stored as they are read (the next fsync covers them)
    and anything else waits its turn behind those answers.
    """

    #: Answers go out as they are made (the worker, if any, waits for nothing or for a command).
    WRITING = "writing"
    #: The worker waits for the fsync that answers the publishes it took.
    AWAITING_FSYNC = "awaiting fsync"
