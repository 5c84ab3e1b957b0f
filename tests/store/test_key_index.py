"""The key index's one-record ``add`` (every single send) against ``add_many``."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.store.key_index import KeyIndex

_RECORDS = st.lists(
    st.tuples(st.lists(st.text(min_size=1, max_size=6), max_size=3), st.integers(0, 40)), max_size=12
)


@settings(max_examples=150)
@given(records=_RECORDS, covered=st.integers(0, 20))
def test_add_indexes_one_record_as_add_many_does(records: list[tuple[list[str], int]], covered: int) -> None:
    """Same entries, the same skipping of records already covered, the same coverage after: records are
    added one at a time, in any offset order a recovery might replay."""
    with tempfile.TemporaryDirectory() as tmp:
        one, many = KeyIndex(Path(tmp, "one")), KeyIndex(Path(tmp, "many"))
        try:
            one.covered_until = many.covered_until = covered
            for keys, offset in records:
                one.add("T", keys, offset)
                many.add_many("T", [[key.encode() for key in keys]], [offset])
                assert one.covered_until == many.covered_until
            one.write_pending()
            many.write_pending()
            assert Path(tmp, "one").read_bytes() == Path(tmp, "many").read_bytes()
            for keys, _ in records:
                for key in keys:
                    assert one.lookup("T", key) == many.lookup("T", key)
        finally:
            one.close()
            many.close()
