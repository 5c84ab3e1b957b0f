"""The source's property columns read every batch as the codec's ``decode_properties`` does, and batches of
one shape take the fast path."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.record import Prop, decode_properties
from tidemq.spark import properties

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_TEXT = st.text(
    st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1, max_size=6
)
_NAMES = st.lists(
    st.sampled_from([Prop.TAGS, Prop.KEYS, Prop.UNIQ_KEY, "WAIT", "CLUSTER"]) | _TEXT,
    min_size=1,
    max_size=5,
    unique=True,
)
#: What can make one record differ from the rest of its batch.
_SPOILERS: list[Callable[[str], str]] = [
    lambda text: text + "\x02EXTRA\x01x",  # one more pair
    lambda text: text.split("\x02", 1)[1] if "\x02" in text.rstrip("\x02") else "",  # one pair fewer
    lambda text: "OTHER" + text[text.index("\x01") :],  # another first name
    lambda text: ("Y" if text[0] == "Z" else "Z") + text[1:],  # a name spelled differently, maybe as long
    lambda text: text.split("\x02")[0] + "\x02" + text,  # the first name twice: the last value wins
    lambda text: text + "\x02EMPTY\x01",  # a pair without a value (dropped)
    lambda text: text + "\x02novalue",  # a pair without a separator (dropped)
    lambda text: "\x01nameless\x02" + text,  # a pair without a name (dropped)
    lambda text: text + "\x01more",  # a value holding the name separator
    lambda text: text[:-1] if text.endswith("\x02") else text + "\x02",  # ended differently
    lambda text: text + "\x02\x02",  # empty pairs
    lambda text: "",  # no properties
]


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[str], bool]:
    """Encoded properties of one batch, each record naming the same keys in the same order (ended by a
    separator as Java encodes, or not as tidemq does), and whether one record was made to differ."""
    names = draw(_NAMES)
    ended = draw(st.booleans())
    texts = [
        "\x02".join(f"{name}\x01{draw(_TEXT)}" for name in names) + ("\x02" if ended else "")
        for _ in range(draw(st.integers(1, 30)))
    ]
    spoiled = draw(st.booleans())
    if spoiled:
        at = draw(st.integers(0, len(texts) - 1))
        texts[at] = draw(st.sampled_from(_SPOILERS))(texts[at])
    return texts, spoiled


def _expected(texts: list[str]) -> tuple[list[object], ...]:
    dicts = [decode_properties(text) for text in texts]
    return (
        [list(d.items()) for d in dicts],
        [d.get(Prop.TAGS) for d in dicts],
        [d.get(Prop.KEYS) for d in dicts],
        [d.get(Prop.UNIQ_KEY) for d in dicts],
    )


@SETTINGS
@given(batches())
def test_columns_match_the_codec(batch: tuple[list[str], bool]) -> None:
    texts, _ = batch
    columns = properties.decode(pa.array(texts, pa.string()))
    for column in columns:
        column.validate(full=True)
    assert tuple(column.to_pylist() for column in columns) == _expected(texts)


@SETTINGS
@given(batches())
def test_batches_of_one_shape_take_the_fast_path(batch: tuple[list[str], bool]) -> None:
    texts, spoiled = batch
    fast = properties._uniform(pa.array(texts, pa.string()))
    if not spoiled:
        assert fast is not None
    if fast is not None:
        assert tuple(column.to_pylist() for column in fast) == _expected(texts)


def test_the_general_path_reads_batches_of_many_shapes() -> None:
    texts = ["A\x01a\x02B\x01b", "B\x01c\x02A\x01d\x02", "A\x01e\x02A\x01f", "", "TAGS\x01t"]
    assert properties._uniform(pa.array(texts, pa.string())) is None
    columns = properties.decode(pa.array(texts, pa.string()))
    assert tuple(column.to_pylist() for column in columns) == _expected(texts)
