"""The TCP V2 verbs nsqd knows, the connection states each is allowed in, and how each is run.

One table (``VERBS``) holds the rules the connection's handlers used to check one by one: a verb in a
state it is not allowed in is answered ``E_INVALID cannot <VERB> in current state`` (fatal), as nsqd does;
RDY after CLS is dropped without an answer. A verb is run *inline* (as it is read, without a task: it never
waits) or *queued* for the connection's worker (it may wait: a TLS upgrade, the auth server). Publishes run
inline unless AUTH is required, when checking the permission may wait.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tidemq.nsq.protocol import Command, NSQError, go_quote, parse_int, valid_name


class State(enum.IntEnum):
    """Where a connection is in the protocol; the numbers are nsqd's, which ``/stats`` shows.

    INIT: connected, identified or not, not subscribed: IDENTIFY, AUTH, SUB (and publishes).
    SUBSCRIBED: after SUB: RDY, FIN, REQ, TOUCH, CLS (and publishes).
    CLOSING: after CLS: FIN, REQ and TOUCH still settle what is in flight; RDY is ignored.
    """

    INIT = 0
    SUBSCRIBED = 3
    CLOSING = 4


@dataclass(frozen=True, slots=True)
class Verb:
    #: The states it is run in; in any other it is refused (or ignored).
    allowed: frozenset[State]
    #: Run as it is read (it never waits); else queued for the worker.
    inline: bool
    #: States where it is dropped without an answer.
    ignored: frozenset[State] = frozenset()
    #: A publish: inline only while no AUTH is required.
    publish: bool = False


ANY = frozenset(State)
_INIT = frozenset({State.INIT})
_SUBSCRIBED = frozenset({State.SUBSCRIBED})
_SETTLING = frozenset({State.SUBSCRIBED, State.CLOSING})

VERBS: dict[bytes, Verb] = {
    b"IDENTIFY": Verb(_INIT, inline=False),
    b"AUTH": Verb(_INIT, inline=False),
    b"SUB": Verb(_INIT, inline=False),
    b"PUB": Verb(ANY, inline=True, publish=True),
    b"MPUB": Verb(ANY, inline=True, publish=True),
    b"DPUB": Verb(ANY, inline=True, publish=True),
    b"RDY": Verb(_SUBSCRIBED, inline=True, ignored=frozenset({State.CLOSING})),
    b"FIN": Verb(_SETTLING, inline=True),
    b"REQ": Verb(_SETTLING, inline=True),
    b"TOUCH": Verb(_SETTLING, inline=True),
    b"CLS": Verb(_SUBSCRIBED, inline=True),
    b"NOP": Verb(ANY, inline=True),
}


def wrong_state(name: bytes) -> NSQError:
    """The answer to a known verb in a state it is not allowed in."""
    return NSQError("E_INVALID", f"cannot {name.decode()} in current state")


def unknown_verb(name: bytes) -> NSQError:
    return NSQError("E_INVALID", f"invalid command {name.decode(errors='replace')}")


def check_publish_line(cmd: Command, max_req_timeout_ms: int) -> None:
    """PUB/MPUB/DPUB's topic (and DPUB's delay), checked in nsqd's order on the command line alone,
    before the body is read."""
    verb = cmd.name.decode()
    if len(cmd.params) < (2 if verb == "DPUB" else 1):
        raise NSQError("E_INVALID", f"{verb} insufficient number of parameters")
    topic = cmd.params[0].decode(errors="replace")
    if not valid_name(topic):
        prefix = "E_BAD_TOPIC " if verb == "MPUB" else ""  # nsqd repeats the code in MPUB's text
        raise NSQError("E_BAD_TOPIC", f"{prefix}{verb} topic name {go_quote(topic)} is not valid")
    if verb == "DPUB":
        delay = parse_int(cmd.params[1], "DPUB", "timeout")
        if delay > max_req_timeout_ms:
            raise NSQError("E_INVALID", f"DPUB timeout {delay} out of range 0-{max_req_timeout_ms}")
