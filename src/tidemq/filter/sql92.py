"""The SQL92 subset RocketMQ consumers filter with (``MessageSelector.bySql``): a parser and an evaluator
with Java's rules (docs/protocols/rocketmq-consumption.md#sql92-filters).

Java's broker evaluates an expression on a message's properties, all of them strings, with three-valued
logic: a comparison with a missing property is unknown (None here), and a message matches only when the
whole expression is TRUE. Numbers are compared only with numbers: a property compared with a numeric
literal is parsed as that literal's type (long or double), two properties under ``<``/``>`` as doubles;
a value that does not parse makes the evaluation fail, and a failed evaluation does not match, as in
Java (its broker logs the error and skips the message). Operands Java refuses when it builds the
expression (``'a' > 1``, ``x = NULL``, ``5 IN (...)``, ``BETWEEN 3 AND 1``) are parse errors here too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

Value = bool | int | float | str | None
Context = Mapping[str, str]
Evaluate = Callable[[Context], Value]

_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_KEYWORDS = frozenset({"AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE"})
_TOKEN = re.compile(
    r"""(?P<ws>\s+)
    |(?P<string>'(?:[^']|'')*')
    |(?P<float>(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
    |(?P<hex>0[xX][0-9a-fA-F]+[lL]?)
    |(?P<long>\d+[lL]?)
    |(?P<id>[A-Za-z_$][A-Za-z0-9_$.]*)
    |(?P<op><>|<=|>=|[=<>(),+-])""",
    re.VERBOSE,
)
_JAVA_DOUBLE = re.compile(r"[+-]?(?:NaN|Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fFdD]?)")
_JAVA_LONG = re.compile(r"[+-]?\d+")


class SqlParseError(ValueError):
    """An expression Java's broker would refuse to compile; ``position`` is the 1-based column."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} at column {position}")
        self.position = position


class SqlEvaluationError(ValueError):
    """A value Java cannot compare (a non-numeric string against a number): the message does not match."""


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # string, float, long, id, op, keyword, end
    text: str
    position: int


@dataclass(frozen=True, slots=True)
class _Node:
    evaluate: Evaluate
    text: str
    boolean: bool = False  # Java's BooleanExpression: may stand where a condition is expected
    constant: bool = False
    value: Value = None
    property: bool = False


@dataclass(frozen=True, slots=True)
class SqlExpression:
    """A compiled expression; ``matches`` is what the pull path asks of each message's properties."""

    text: str
    root: Evaluate

    def evaluate(self, properties: Context) -> Value:
        """TRUE, FALSE or None (unknown); raises SqlEvaluationError where Java's evaluation throws."""
        return self.root(properties)

    def matches(self, properties: Context) -> bool:
        try:
            return self.root(properties) is True
        except SqlEvaluationError:
            return False


def compile_sql(text: str) -> SqlExpression:
    """Parse ``text`` or raise SqlParseError naming the problem and its column."""
    parser = _Parser(text)
    node = parser.boolean(parser.or_expr(), "the expression")
    parser.expect_end()
    return SqlExpression(text, node.evaluate)


# --- tokens -----------------------------------------------------------------------------------------


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            quote = "an unterminated string" if text[pos] == "'" else f"unexpected character {text[pos]!r}"
            raise SqlParseError(quote, pos + 1)
        kind = m.lastgroup or ""
        if kind != "ws":
            word = m.group()
            if kind == "id" and word.upper() in _KEYWORDS:
                kind, word = "keyword", word.upper()
            tokens.append(_Token(kind, word, pos + 1))
        pos = m.end()
    tokens.append(_Token("end", "", len(text) + 1))
    return tokens


# --- the parser -------------------------------------------------------------------------------------


class _Parser:
    """Recursive descent over Java's grammar: OR < AND < equality (=, <>, IS) < comparison (<, >, IN,
    BETWEEN) < unary (+, -, NOT) < primary."""

    def __init__(self, text: str) -> None:
        self.tokens = _tokenize(text)
        self.at = 0

    @property
    def token(self) -> _Token:
        return self.tokens[self.at]

    def accept(self, *texts: str) -> _Token | None:
        tok = self.token
        if tok.kind in ("keyword", "op") and tok.text in texts:
            self.at += 1
            return tok
        return None

    def expect(self, text: str) -> _Token:
        tok = self.accept(text)
        if tok is None:
            raise SqlParseError(f"expected {text!r}, found {self._describe(self.token)}", self.token.position)
        return tok

    def expect_end(self) -> None:
        if self.token.kind != "end":
            raise SqlParseError(f"unexpected {self._describe(self.token)}", self.token.position)

    @staticmethod
    def _describe(tok: _Token) -> str:
        return "the end of the expression" if tok.kind == "end" else repr(tok.text)

    def boolean(self, node: _Node, where: str) -> _Node:
        """Java's asBooleanExpression: a property stands as a boolean cast; any other value is refused."""
        if node.boolean:
            return node
        if node.property:
            cast = node.evaluate
            return _Node(lambda c: _boolean_cast(cast(c)), node.text, boolean=True)
        raise SqlParseError(f"{where} will not result in a boolean value: {node.text}", self.token.position)

    def or_expr(self) -> _Node:
        left = self.and_expr()
        while tok := self.accept("OR"):
            right = self.boolean(self.and_expr(), "OR's right operand")
            left = _or(self.boolean(left, "OR's left operand"), right, tok.position)
        return left

    def and_expr(self) -> _Node:
        left = self.equality()
        while tok := self.accept("AND"):
            right = self.boolean(self.equality(), "AND's right operand")
            left = _and(self.boolean(left, "AND's left operand"), right, tok.position)
        return left

    def equality(self) -> _Node:
        left = self.comparison()
        while True:
            if tok := self.accept("=", "<>"):
                right = self.comparison()
                left = _equal(left, right, tok.position, negate=tok.text == "<>")
            elif self.accept("IS"):
                negate = self.accept("NOT") is not None
                self.expect("NULL")
                left = _is_null(left, negate)
            else:
                return left

    def comparison(self) -> _Node:
        left = self.unary()
        while True:
            if tok := self.accept("<", "<=", ">", ">="):
                left = _relation(left, self.unary(), tok.text, tok.position)
                continue
            start = self.at
            negate = self.accept("NOT") is not None
            if tok := self.accept("IN"):
                left = self._in(left, negate, tok.position)
            elif tok := self.accept("BETWEEN"):
                low = self.unary()
                self.expect("AND")
                high = self.unary()
                left = _between(left, low, high, negate, tok.position)
            else:
                self.at = start
                return left

    def _in(self, left: _Node, negate: bool, position: int) -> _Node:
        if not left.property:
            raise SqlParseError(f"expected a property for IN, got {left.text}", position)
        self.expect("(")
        values = [self._string()]
        while self.accept(","):
            values.append(self._string())
        self.expect(")")
        members, get = frozenset(values), left.evaluate

        def evaluate(c: Context) -> Value:
            value = get(c)
            if not isinstance(value, str):
                return None
            return (value in members) != negate

        word = "NOT IN" if negate else "IN"
        return _Node(evaluate, f"{left.text} {word} ({', '.join(map(_quote, values))})", boolean=True)

    def _string(self) -> str:
        tok = self.token
        if tok.kind != "string":
            raise SqlParseError(f"IN takes string literals, found {self._describe(tok)}", tok.position)
        self.at += 1
        return tok.text[1:-1].replace("''", "'")

    def unary(self) -> _Node:
        if self.accept("+"):
            return self.unary()
        if tok := self.accept("-"):
            return _negate(self.unary(), tok.position)
        if self.accept("NOT"):
            inner = self.boolean(self.unary(), "NOT's operand")
            get = inner.evaluate
            return _Node(lambda c: _not(get(c)), f"NOT {inner.text}", boolean=True)
        return self.primary()

    def primary(self) -> _Node:
        tok = self.token
        self.at += 1
        if tok.kind == "string":
            return _constant(tok.text[1:-1].replace("''", "'"), tok.text)
        if tok.kind in ("long", "hex"):
            digits = tok.text.rstrip("lL")
            value = int(digits, 16) if tok.kind == "hex" else int(digits)
            if value > _LONG_MAX:
                raise SqlParseError(f"{tok.text} is out of a long's range", tok.position)
            return _constant(value, tok.text)
        if tok.kind == "float":
            return _constant(float(tok.text), tok.text)
        if tok.kind == "id":
            name = tok.text
            return _Node(lambda c: c.get(name), name, property=True)
        if tok.kind == "keyword" and tok.text in ("TRUE", "FALSE", "NULL"):
            literal: Value = {"TRUE": True, "FALSE": False, "NULL": None}[tok.text]
            return _Node(lambda c: literal, tok.text, boolean=True, constant=True, value=literal)
        if tok.kind == "op" and tok.text == "(":
            inner = self.or_expr()
            self.expect(")")
            return _Node(inner.evaluate, f"({inner.text})", inner.boolean, inner.constant, inner.value, False)
        self.at -= 1
        raise SqlParseError(f"unexpected {self._describe(tok)}", tok.position)


# --- building nodes (Java's checks at compile time) ---------------------------------------------------


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _constant(value: Value, text: str) -> _Node:
    return _Node(lambda c: value, text, constant=True, value=value)


def _check_orderable(node: _Node, position: int) -> None:
    """Java's checkLessThanOperand: only numbers may be ordered."""
    if (not _is_number(node.value)) if node.constant else node.boolean:
        raise SqlParseError(f"value {node.text} cannot be compared", position)


def _and(left: _Node, right: _Node, position: int) -> _Node:
    lget, rget = left.evaluate, right.evaluate

    def evaluate(c: Context) -> Value:
        lv = lget(c)
        if lv is False:
            return False
        rv = rget(c)
        if rv is False:
            return False
        return None if lv is None or rv is None else True

    return _Node(evaluate, f"{left.text} AND {right.text}", boolean=True)


def _or(left: _Node, right: _Node, position: int) -> _Node:
    lget, rget = left.evaluate, right.evaluate

    def evaluate(c: Context) -> Value:
        lv = lget(c)
        if lv is True:
            return True
        rv = rget(c)
        if rv is True:
            return True
        return None if lv is None or rv is None else False

    return _Node(evaluate, f"{left.text} OR {right.text}", boolean=True)


def _equal(left: _Node, right: _Node, position: int, negate: bool) -> _Node:
    for node in (left, right):
        if node.constant and node.value is None:
            raise SqlParseError(f"{node.text} cannot be compared (use IS NULL)", position)
    if left.constant and right.constant and left.boolean and not right.boolean:
        raise SqlParseError(f"{left.text} cannot be compared with {right.text}", position)
    lget, rget = left.evaluate, right.evaluate

    def evaluate(c: Context) -> Value:
        result = _equals(lget(c), rget(c))
        return _not(result) if negate else result

    return _Node(evaluate, f"{left.text} {'<>' if negate else '='} {right.text}", boolean=True)


def _is_null(left: _Node, negate: bool) -> _Node:
    get = left.evaluate
    return _Node(
        lambda c: (get(c) is None) != negate, f"{left.text} IS {'NOT ' if negate else ''}NULL", boolean=True
    )


_ORDER: dict[str, Callable[[int], bool]] = {
    "<": lambda n: n < 0,
    "<=": lambda n: n <= 0,
    ">": lambda n: n > 0,
    ">=": lambda n: n >= 0,
}


def _relation(left: _Node, right: _Node, symbol: str, position: int) -> _Node:
    _check_orderable(left, position)
    _check_orderable(right, position)
    lget, rget, holds = left.evaluate, right.evaluate, _ORDER[symbol]

    def evaluate(c: Context) -> Value:
        lv = lget(c)
        if lv is None:
            return None
        rv = rget(c)
        if rv is None:
            return None
        if isinstance(lv, str) and isinstance(rv, str):
            return holds(_compare(_java_double(lv), _java_double(rv)))
        return holds(_compare(lv, rv))

    return _Node(evaluate, f"{left.text} {symbol} {right.text}", boolean=True)


def _between(value: _Node, low: _Node, high: _Node, negate: bool, position: int) -> _Node:
    if low.constant and high.constant:
        if low.value is None or high.value is None:
            raise SqlParseError("BETWEEN's bounds cannot be NULL", position)
        if _compare(high.value, low.value) < 0:
            raise SqlParseError(
                f"BETWEEN's low bound {low.text} is above its high bound {high.text}", position
            )
    if negate:
        return _or(_relation(value, low, "<", position), _relation(value, high, ">", position), position)
    return _and(_relation(value, low, ">=", position), _relation(value, high, "<=", position), position)


def _negate(node: _Node, position: int) -> _Node:
    if node.constant:
        if not _is_number(node.value):
            raise SqlParseError(f"cannot negate {node.text}", position)
        assert isinstance(node.value, int | float)
        return _constant(-node.value, f"-{node.text}")
    get = node.evaluate
    return _Node(lambda c: -v if _is_number(v := get(c)) else None, f"-{node.text}")  # type: ignore[operator]


# --- values (Java's rules at evaluation time) ---------------------------------------------------------


def _is_number(value: Value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _not(value: Value) -> Value:
    return None if value is None else not value


def _boolean_cast(value: Value) -> Value:
    return None if value is None else value is True


def _equals(lv: Value, rv: Value) -> Value:
    if lv is None:
        return None if rv is not None else True
    if rv is None:
        return False
    if type(lv) is type(rv) and lv == rv:
        return True
    return _compare(lv, rv) == 0


def _compare(lv: Value, rv: Value) -> int:
    """Java's ComparisonExpression.__compare: values of different types are converted up (long to
    double, a string to the other side's type) or, when they cannot be, compare as "less" (-1)."""
    if type(lv) is not type(rv):
        if isinstance(lv, bool) or isinstance(rv, bool):
            if isinstance(lv, str):
                lv = lv.lower() == "true"
            elif isinstance(rv, str):
                raise SqlEvaluationError(f"cannot compare {lv!r} with {rv!r}")
            else:
                return -1
        elif isinstance(lv, str):
            lv = _java_long(lv) if isinstance(rv, int) else _java_double(lv)
        elif isinstance(rv, str):
            rv = _java_long(rv) if isinstance(lv, int) else _java_double(rv)
        elif lv is None or rv is None:
            return -1
    assert lv is not None and rv is not None
    if lv < rv:  # type: ignore[operator]
        return -1
    return 1 if lv > rv else 0  # type: ignore[operator]


def _java_long(text: str) -> int:
    if _JAVA_LONG.fullmatch(text) and _LONG_MIN <= (value := int(text)) <= _LONG_MAX:
        return value
    raise SqlEvaluationError(f"{text!r} is not a long")


def _java_double(text: str) -> float:
    stripped = text.strip()
    if _JAVA_DOUBLE.fullmatch(stripped):
        return float(stripped.rstrip("fFdD"))
    raise SqlEvaluationError(f"{text!r} is not a number")
