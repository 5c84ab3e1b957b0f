"""The SQL92 subset of RocketMQ's MessageSelector.bySql: every operator, Java's null and type rules, and
parse errors with their columns (docs/protocols/rocketmq-consumption.md#sql92-filters)."""

from __future__ import annotations

import pytest

from tidemq.filter import SqlParseError, compile_sql
from tidemq.filter.sql92 import SqlEvaluationError

PROPS = {"a": "10", "b": "2.5", "region": "eu", "flag": "true", "TAGS": "TagA", "neg": "-3", "text": "abc"}


def value(expression: str, props: dict[str, str] | None = None) -> object:
    return compile_sql(expression).evaluate(PROPS if props is None else props)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # comparisons: a string property against a long literal is parsed as a long
        ("a = 10", True),
        ("a <> 10", False),
        ("a <> 11", True),
        ("a > 5", True),
        ("a >= 10", True),
        ("a < 10", False),
        ("a <= 10", True),
        ("a > 10", False),
        # ... against a double literal as a double
        ("b > 2.4", True),
        ("b < 2.6", True),
        ("b = 2.5", True),
        ("a = 10.0", True),
        ("b > 1e0", True),
        ("neg < -2", True),
        ("neg = -3", True),
        ("a > +9", True),
        # two properties under < or > compare as doubles
        ("b < a", True),
        ("a < b", False),
        # string equality
        ("region = 'eu'", True),
        ("region = 'EU'", False),
        ("region <> 'us'", True),
        ("TAGS = 'TagA'", True),
        ("'eu' = region", True),
        # literals and booleans
        ("TRUE", True),
        ("FALSE", False),
        ("flag = TRUE", True),
        ("flag = false", False),
        ("TRUE = TRUE", True),
        ("1 = 1", True),
        ("1 = 1.0", True),
        ("2 > 1", True),
        ("'it''s' = 'it''s'", True),
        # BETWEEN
        ("a BETWEEN 10 AND 20", True),
        ("a BETWEEN 11 AND 20", False),
        ("a NOT BETWEEN 11 AND 20", True),
        ("a not between 1 and 10", False),
        ("b BETWEEN 2.0 AND 3.0", True),
        # IN
        ("region IN ('eu', 'us')", True),
        ("region IN ('us')", False),
        ("region NOT IN ('us', 'ap')", True),
        ("region NOT IN ('eu')", False),
        ("a IN ('10')", True),
        # IS [NOT] NULL
        ("missing IS NULL", True),
        ("a IS NULL", False),
        ("a IS NOT NULL", True),
        ("missing IS NOT NULL", False),
        # AND / OR / NOT and precedence
        ("a > 5 AND region IN ('eu','us')", True),
        ("a > 50 OR region = 'eu'", True),
        ("a > 50 OR region = 'us'", False),
        ("NOT (a > 50)", True),
        ("NOT (a > 5 AND region = 'eu')", False),
        ("a > 50 AND region = 'eu' OR TAGS = 'TagA'", True),
        ("a > 50 AND (region = 'eu' OR TAGS = 'TagA')", False),
        ("not not TRUE", True),
        # keywords are case-insensitive
        ("a between 1 and 20 and region in ('eu') or false", True),
    ],
)
def test_operators(expression: str, expected: bool) -> None:
    assert value(expression) is expected


@pytest.mark.parametrize(
    "expression",
    [
        "missing = 1",
        "missing > 1",
        "missing <> 'x'",
        "missing BETWEEN 1 AND 2",
        "missing IN ('x')",
        "missing NOT IN ('x')",
        "NOT missing = 1",
        "missing = 1 AND TRUE",
        "missing = 1 OR FALSE",
        "-missing = 1",
    ],
)
def test_a_missing_property_makes_the_comparison_unknown(expression: str) -> None:
    """Unknown, not FALSE: even negated, it does not match (three-valued logic as in Java)."""
    assert value(expression) is None
    assert not compile_sql(expression).matches(PROPS)


def test_unknown_gives_way_to_a_decided_operand() -> None:
    assert value("missing = 1 AND FALSE") is False
    assert value("missing = 1 OR TRUE") is True
    assert value("FALSE AND missing = 1") is False


def test_values_of_different_types() -> None:
    """A string meeting a number is converted to the number's type; a boolean never equals a number."""
    assert value("'10' = 10") is True
    assert value("a = 'x'") is False
    assert value("a = TRUE") is False


def test_a_non_numeric_value_against_a_number_fails_the_evaluation_and_does_not_match() -> None:
    """Java's Long.valueOf throws, the broker logs it and skips the message, whatever else the
    expression says."""
    for expression in ("text > 1", "text = 1", "b = 2", "b >= 2", "text > a", "text = 1 OR TRUE"):
        with pytest.raises(SqlEvaluationError):
            compile_sql(expression).evaluate(PROPS)
        assert not compile_sql(expression).matches(PROPS)


def test_a_property_alone_is_a_boolean_cast() -> None:
    """A string is never TRUE; only a missing property is unknown."""
    assert value("flag") is False
    assert value("missing") is None
    assert value("NOT flag") is True


def test_long_and_double_literals() -> None:
    assert value("a = 10L") is True
    assert value("a = 0xA") is True
    assert value("big = 9223372036854775807", {"big": "9223372036854775807"}) is True
    assert value("b > .5") is True
    with pytest.raises(SqlEvaluationError):
        value("a = 1", {"a": "9223372036854775808"})  # past a long's range: Java throws too


@pytest.mark.parametrize(
    ("expression", "column", "words"),
    [
        ("", 1, "end of the expression"),
        ("a >", 4, "end of the expression"),
        ("a > 5 AND", 10, "end of the expression"),
        ("a = 'x", 5, "unterminated string"),
        ("a @ 1", 3, "'@'"),
        ("(a > 1", 7, "expected ')'"),
        ("a > 1)", 6, "unexpected ')'"),
        ("a > 1 b", 7, "unexpected 'b'"),
        ("'x' > 1", 5, "'x' cannot be compared"),
        ("a > TRUE", 3, "TRUE cannot be compared"),
        ("a > (b = 1)", 3, "cannot be compared"),
        ("a = NULL", 3, "NULL cannot be compared"),
        ("NULL = a", 6, "NULL cannot be compared"),
        ("TRUE = 1", 6, "TRUE cannot be compared with 1"),
        ("a BETWEEN 3 AND 1", 3, "above its high bound"),
        ("a BETWEEN 'x' AND 'y'", 3, "'x' cannot be compared"),
        ("5 IN ('a')", 3, "expected a property for IN"),
        ("a IN (1, 2)", 7, "IN takes string literals"),
        ("a IN ()", 7, "IN takes string literals"),
        ("a IS 1", 6, "expected 'NULL'"),
        ("5", 2, "will not result in a boolean"),
        ("'x'", 4, "will not result in a boolean"),
        ("a > 1 AND 5", 12, "will not result in a boolean"),
        ("NOT 'x'", 8, "will not result in a boolean"),
        ("-'x' = a", 1, "cannot negate"),
        ("NOT a > 50", 7, "NOT a cannot be compared"),
        ("a = 9223372036854775808", 5, "out of a long's range"),
    ],
)
def test_parse_errors_name_the_problem_and_its_column(expression: str, column: int, words: str) -> None:
    with pytest.raises(SqlParseError) as caught:
        compile_sql(expression)
    assert caught.value.position == column
    assert words in str(caught.value)
    assert f"at column {column}" in str(caught.value)
