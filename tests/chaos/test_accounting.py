"""The suite's accounting must be able to fail: a missing acknowledged body is lost, extra copies are
duplicates, unacknowledged extras are neither."""

from __future__ import annotations

from tests.chaos.chaos_support import Tally


def test_an_acknowledged_body_never_consumed_is_lost_and_extra_copies_are_duplicates() -> None:
    tally = Tally("remoting", acknowledged={"a", "b", "c"})
    lost, duplicates, missing = tally.check(["a", "a", "a", "c", "unacked"])
    assert (lost, duplicates, missing) == (1, 2, {"b"})


def test_everything_consumed_once_is_clean() -> None:
    assert Tally("nsq", acknowledged={"a", "b"}).check(["b", "a"]) == (0, 0, set())
