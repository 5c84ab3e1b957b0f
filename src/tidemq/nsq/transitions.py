"""A connection's life as a declared table: every allowed ``(state, event) -> state`` move, and the one
way to take a move.

nsqd's connection (``nsqd/lifecycle.py``) and the client's connection to nsqd (``client/conn_state.py``)
each declare their own states, events and table; this module owns only what the two share: looking a move
up, and refusing a pair the table does not list, which is a bug in the caller rather than something the
peer can cause.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from typing import TypeVar

S = TypeVar("S", bound=enum.Enum)
E = TypeVar("E", bound=enum.Enum)


class Transitions(Mapping[tuple[S, E], S]):
    """Every allowed move of one state machine; reads as the ``(state, event) -> state`` table it holds."""

    __slots__ = ("_table", "name")

    def __init__(self, name: str, table: dict[tuple[S, E], S]) -> None:
        #: What moves along the table, as the error for a pair it does not list names it.
        self.name = name
        self._table = table

    def advance(self, state: S, event: E) -> S:
        """The state ``event`` moves ``state`` to; a pair not in the table is a bug in the caller."""
        try:
            return self._table[state, event]
        except KeyError:
            raise RuntimeError(f"{self.name}: {event.value} while {state.value}") from None

    def __getitem__(self, move: tuple[S, E]) -> S:
        return self._table[move]

    def __iter__(self) -> Iterator[tuple[S, E]]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)
