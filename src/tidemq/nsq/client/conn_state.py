"""Where a client connection to nsqd is in its life, and the events that move it (``NsqdConn``'s rules).

The connection dials and bootstraps (CONNECTING), hands the caller the IDENTIFY response (BOOTSTRAPPED),
and from the next loop pass on delivers every read as it comes (LIVE). It ends either closed by its owner
(CLOSED, then TORN_DOWN on the next loop pass, when the delegate hears ``on_close``) or torn down at once
(TORN_DOWN: nsqd closed it, a read failed, nothing was read for ``read_timeout``). A connection whose
``connect()`` raised goes straight to TORN_DOWN and its delegate never hears ``on_close``: the caller
got the exception instead.

That the socket is gone (asyncio's ``connection_lost``) is not a state of its own: before LIVE it is
read later (bootstrap fails with EOF, the pass that goes live delivers what arrived and then tears
down), once LIVE it tears down at once (``ConnEvent.TEARDOWN``).

The RDY bookkeeping and ``closing`` (nsqd answered CLS with CLOSE_WAIT) belong to the consumer.
"""

from __future__ import annotations

import enum

from tidemq.nsq.transitions import Transitions


class ConnState(enum.Enum):
    #: Dialing, then IDENTIFY, the upgrades nsqd grants, AUTH; reads are collected for the handshake.
    CONNECTING = "connecting"
    #: ``connect()`` returned; reads are still collected until the next loop pass goes live, so the
    #: caller can queue its first commands (SUB, RDY) before any frame reaches the delegate.
    BOOTSTRAPPED = "bootstrapped"
    #: Every read is parsed and handed to the delegates as it arrives.
    LIVE = "live"
    #: Closed by its owner: nothing more is sent or delivered; ``on_close`` comes on the next loop pass.
    CLOSED = "closed"
    #: Done: the delegate heard ``on_close`` once (never, when ``connect()`` raised instead).
    TORN_DOWN = "torn down"


class ConnEvent(enum.Enum):
    #: The handshake is done; ``connect()`` returns.
    BOOTSTRAP_DONE = "bootstrap done"
    #: The loop pass after ``connect()`` returned.
    GO_LIVE = "go live"
    #: ``close()``: flush what is queued and close.
    CLOSE = "close"
    #: Dial or bootstrap failed: ``connect()`` raises.
    CONNECT_FAILED = "connect failed"
    #: The end: ``close()``'s next loop pass, nsqd closing the socket, a failed read, a read timeout.
    TEARDOWN = "teardown"


_S, _E = ConnState, ConnEvent

#: Every allowed move; ``NsqdConn`` checks the state before an event where the pair is not listed here.
TRANSITIONS = Transitions(
    "connection to nsqd",
    {
        (_S.CONNECTING, _E.BOOTSTRAP_DONE): _S.BOOTSTRAPPED,
        (_S.CONNECTING, _E.CONNECT_FAILED): _S.TORN_DOWN,
        # closed before it was established: connect() raises, so nobody is told on_close
        (_S.CONNECTING, _E.CLOSE): _S.TORN_DOWN,
        (_S.BOOTSTRAPPED, _E.GO_LIVE): _S.LIVE,
        (_S.BOOTSTRAPPED, _E.CLOSE): _S.CLOSED,
        (_S.BOOTSTRAPPED, _E.TEARDOWN): _S.TORN_DOWN,
        (_S.LIVE, _E.CLOSE): _S.CLOSED,
        (_S.LIVE, _E.TEARDOWN): _S.TORN_DOWN,
        (_S.CLOSED, _E.TEARDOWN): _S.TORN_DOWN,
        # bootstrap's last step noticed a close() that came while it ran
        (_S.TORN_DOWN, _E.CONNECT_FAILED): _S.TORN_DOWN,
        # a read failed after the owner closed it: the teardown close() scheduled finds it done
        (_S.TORN_DOWN, _E.TEARDOWN): _S.TORN_DOWN,
    },
)

#: Where nothing more is sent or delivered.
ENDED = frozenset({ConnState.CLOSED, ConnState.TORN_DOWN})


def notifies(state: ConnState, event: ConnEvent) -> bool:
    """Whether ``event`` in ``state`` is the one that tells the delegate ``on_close``."""
    return event is ConnEvent.TEARDOWN and state is not ConnState.TORN_DOWN
