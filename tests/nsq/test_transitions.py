"""The table both NSQ connection state machines are declared as: a move is a lookup, an unlisted pair a bug.

Each machine's own table (its moves, what is final, what is reachable) is tested beside it:
tests/nsq/client/test_conn_state.py and tests/nsq/nsqd/test_lifecycle.py.
"""

from __future__ import annotations

import enum

import pytest

from tidemq.nsq.transitions import Transitions

Door = enum.Enum("Door", {"OPEN": "open", "SHUT": "shut"})
Push = enum.Enum("Push", {"CLOSE": "close", "SLAM": "slam"})


TABLE = {
    (Door.OPEN, Push.CLOSE): Door.SHUT,
    (Door.OPEN, Push.SLAM): Door.SHUT,
    (Door.SHUT, Push.SLAM): Door.SHUT,
}
DOOR = Transitions("door", TABLE)


def test_a_move_is_the_table_entry() -> None:
    for (state, event), target in TABLE.items():
        assert DOOR.advance(state, event) is target


def test_an_unlisted_pair_is_a_bug_named_by_the_machine_event_and_state() -> None:
    with pytest.raises(RuntimeError) as raised:
        DOOR.advance(Door.SHUT, Push.CLOSE)
    assert str(raised.value) == "door: close while shut"
    assert raised.value.__cause__ is None and raised.value.__suppress_context__  # no KeyError behind it


def test_it_reads_as_the_table_it_holds() -> None:
    assert dict(DOOR) == TABLE and len(DOOR) == len(TABLE)
    assert list(DOOR) == list(TABLE) and list(DOOR.items()) == list(TABLE.items())
    assert (Door.OPEN, Push.CLOSE) in DOOR and (Door.SHUT, Push.CLOSE) not in DOOR
    assert DOOR[Door.SHUT, Push.SLAM] is Door.SHUT
    assert DOOR.get((Door.SHUT, Push.CLOSE)) is None
