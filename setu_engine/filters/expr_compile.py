"""The filter language's typing and compilation, to Python and to SQL.

`compile_filter` type-checks the AST against the chain's current columns and
turns it into a `Compiled`: a Python function of an input row and the SQL
text PostgreSQL evaluates, with the same result (NULLs included):
- literals are typed like PostgreSQL types them (an integer literal is
  integer, bigint or numeric by size); a string literal compared with a typed
  operand is converted to that type at plan time (`cast`, from casts);
- numbers are promoted explicitly in the SQL (int -> numeric -> double; real
  arithmetic runs in double), so PostgreSQL never picks an operator for us;
- integer arithmetic checks the result type's range, integer division
  truncates toward zero, division by zero raises in both; numeric division
  rounds to PostgreSQL's select_div_scale;
- text compares with COLLATE "C" (code point order, as Python's str);
- NaN equals NaN and sorts above every number (PostgreSQL's float/numeric order);
- and/or short-circuit left to right, three-valued.

Separate from expr.py, which only tokenizes and parses: this half knows the
neutral types, PostgreSQL's typing and arithmetic rules, and the SQL text;
`Compiled` and its helpers are also what operators and casts build on.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from operator import itemgetter
from typing import Any

from setu_engine.errors import CastError, ExprError, OperatorError, RowFault
from setu_engine.filters.expr import (
    COMPARISONS,
    Between,
    Binary,
    InList,
    IsNull,
    Literal,
    Name,
    Node,
    Unary,
)
from setu_engine.values.types import INTEGERS, NUMBERS, PG_TYPES, Row


def row_fault(
    error: Exception, batch: Sequence[Row], run: Callable[[Row], object], before: int
) -> RowFault:
    """The fault a batch raised, at the first row that raises it again when
    `run` (the chain over one row) takes the rows one by one; `before`:
    rows of earlier batches."""
    for index, row in enumerate(batch):
        try:
            run(row)
        except (OperatorError, ArithmeticError, TypeError, AttributeError) as exc:
            return _fault(exc, row, before + index + 1)
    return _fault(error, None, None)


def _fault(error: Exception, row: Row | None, number: int | None) -> RowFault:
    if isinstance(error, CastError):
        return RowFault(error.reason, column=error.column, value=error.value, row=number)
    reason = (
        str(error)
        if isinstance(error, OperatorError | ArithmeticError)
        else (f"the operators cannot process this row ({type(error).__name__}: {error})")
    )
    return RowFault(reason, column=None, value=row, row=number)


Fn = Callable[[Row], Any]
UNKNOWN = "unknown"  # an untyped string or null literal, typed by its context

_INT_RANGE = {"smallint": 2**15, "integer": 2**31, "bigint": 2**63}
_INT_RANK = {"smallint": 0, "integer": 1, "bigint": 2}
# Exact numeric arithmetic: PostgreSQL's numeric holds up to 147k digits.
NUMERIC_CTX = decimal.Context(
    prec=200_000,
    Emax=decimal.MAX_EMAX,
    Emin=decimal.MIN_EMIN,
    rounding=decimal.ROUND_HALF_UP,
    traps=[decimal.InvalidOperation, decimal.DivisionByZero, decimal.Overflow],
)


@dataclass(frozen=True)
class Compiled:
    """One typed expression, both ways: `fn` maps an input row to the value,
    `sql` computes the same value from the staging relation's columns."""

    type: str
    sql: str
    fn: Fn
    const: bool = False  # no column involved: `fn(())` is its value

    def value(self) -> Any:
        return self.fn(())


Cast = Callable[[Compiled, str], Compiled]


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    if "\x00" in text:
        raise ExprError("a string cannot contain a NUL character")
    body = text.replace("'", "''")
    if "\\" in body:
        # E'' reads the same whatever standard_conforming_strings says.
        return "E'" + body.replace("\\", "\\\\") + "'"
    return "'" + body + "'"


def constant(value: Any, type_: str, sql: str) -> Compiled:
    return Compiled(type_, sql, lambda _row: value, const=True)


def check_int(value: int, type_: str) -> int:
    limit = _INT_RANGE[type_]
    if not -limit <= value < limit:
        raise OperatorError(f"{type_} out of range")
    return value


def compile_filter(node: Node, columns: dict[str, Compiled], cast: Cast) -> Compiled:
    """A boolean Compiled for `node` over `columns` (name -> current
    expression); raises ExprError for unknown columns and type errors."""
    result = _Compiler(columns, cast).compile(node)
    if result.type == UNKNOWN and result.const and result.value() is None:
        return constant(None, "boolean", "CAST(NULL AS boolean)")
    if result.type != "boolean":
        raise ExprError(f"a filter must be a condition, not {_kind(result.type)}")
    return result


def _kind(type_: str) -> str:
    return "a string" if type_ == UNKNOWN else f"a {type_} value"


class _Compiler:
    def __init__(self, columns: dict[str, Compiled], cast: Cast) -> None:
        self.columns = columns
        self.cast = cast

    def compile(self, node: Node) -> Compiled:
        result = self.compile_node(node)
        if result.const:
            # PostgreSQL folds constants while planning, so `1 / 0` fails
            # even with no rows; fail at plan time here too.
            try:
                result.value()
            except OperatorError as exc:
                raise ExprError(f"{exc} at {node.pos}", node.pos) from None
        return result

    def compile_node(self, node: Node) -> Compiled:
        match node:
            case Name():
                return self.name(node)
            case Literal():
                return _literal(node)
            case Unary(op="not", operand=a):
                return _not(self.boolean(a, node.pos))
            case Unary(op="-", operand=a):
                return _negate(self.number(self.compile(a), "-", node.pos))
            case Binary(op="and" | "or"):
                left, right = self.boolean(node.left, node.pos), self.boolean(node.right, node.pos)
                return _and(left, right) if node.op == "and" else _or(left, right)
            case Binary(op=op) if op in COMPARISONS:
                return self.compare(op, self.compile(node.left), self.compile(node.right), node.pos)
            case Binary(op=op):
                return self.arithmetic(op, node)
            case IsNull(operand=a, negated=negated):
                return _is_null(self.compile(a), negated)
            case InList():
                value = self.compile(node.operand)
                tests = [self.compare("=", value, self.compile(i), i.pos) for i in node.items]
                result = tests[0]
                for test in tests[1:]:
                    result = _or(result, test)
                return _not(result) if node.negated else result
            case Between():
                value = self.compile(node.operand)
                low = self.compare(">=", value, self.compile(node.low), node.pos)
                result = _and(low, self.compare("<=", value, self.compile(node.high), node.pos))
                return _not(result) if node.negated else result
        raise AssertionError(node)

    def name(self, node: Name) -> Compiled:
        found = self.columns.get(node.name)
        if found is None:
            known = ", ".join(self.columns) or "none"
            raise ExprError(
                f"unknown column {node.name!r} at {node.pos} (columns: {known})", node.pos
            )
        return found

    def boolean(self, node: Node, pos: int) -> Compiled:
        c = self.compile(node)
        if c.type == UNKNOWN and c.const and c.value() is None:
            return constant(None, "boolean", "CAST(NULL AS boolean)")
        if c.type != "boolean":
            raise ExprError(f"expected a condition at {pos}, got {_kind(c.type)}", pos)
        return c

    def number(self, c: Compiled, op: str, pos: int) -> Compiled:
        if c.type not in NUMBERS:
            raise ExprError(f"{op!r} at {pos} needs numbers, not {_kind(c.type)}", pos)
        return c

    def coerce(self, c: Compiled, to: str, pos: int) -> Compiled:
        if c.type == to:
            return c
        try:
            return self.cast(c, to)
        except (OperatorError, ValueError) as exc:
            raise ExprError(f"cannot read {c.value()!r} as {to} at {pos}: {exc}", pos) from exc

    def unify(self, left: Compiled, right: Compiled, pos: int) -> tuple[Compiled, Compiled]:
        if left.type == UNKNOWN and right.type == UNKNOWN:
            return self.coerce(left, "text", pos), self.coerce(right, "text", pos)
        if left.type == UNKNOWN:
            return self.coerce(left, right.type, pos), right
        if right.type == UNKNOWN:
            return left, self.coerce(right, left.type, pos)
        if left.type in NUMBERS and right.type in NUMBERS:
            common = _promoted(left.type, right.type)
            return _promote(left, common), _promote(right, common)
        if left.type == right.type:
            return left, right
        raise ExprError(f"cannot compare {left.type} with {right.type} at {pos}", pos)

    def compare(self, op: str, left: Compiled, right: Compiled, pos: int) -> Compiled:
        left, right = self.unify(left, right, pos)
        if left.type in ("json", "bytes"):
            raise ExprError(f"cannot compare {left.type} values at {pos}", pos)
        return _comparison(op, left, right)

    def arithmetic(self, op: str, node: Binary) -> Compiled:
        left, right = self.compile(node.left), self.compile(node.right)
        if left.type == UNKNOWN and left.const and left.value() is None:
            left = self.coerce(left, self.number(right, op, node.pos).type, node.pos)
        if right.type == UNKNOWN and right.const and right.value() is None:
            right = self.coerce(right, self.number(left, op, node.pos).type, node.pos)
        self.number(left, op, node.pos)
        self.number(right, op, node.pos)
        common = _promoted(left.type, right.type)
        if op == "%" and common == "double":
            raise ExprError(f"'%' at {node.pos} needs integers or numerics", node.pos)
        return _arith(op, _promote(left, common), _promote(right, common))


def _literal(node: Literal) -> Compiled:
    value = node.value
    if node.kind == "null":
        return constant(None, UNKNOWN, "NULL")
    if node.kind == "bool":
        return constant(value, "boolean", "true" if value else "false")
    if node.kind == "string":
        assert isinstance(value, str)
        return constant(value, UNKNOWN, quote_literal(value))
    if node.kind == "int":
        assert isinstance(value, int)
        for type_ in ("integer", "bigint"):
            if value < _INT_RANGE[type_]:
                return constant(value, type_, f"CAST({value} AS {type_})")
        value = Decimal(value)
    assert isinstance(value, Decimal)
    return constant(value, "numeric", f"CAST('{value}' AS numeric)")


def _promoted(a: str, b: str) -> str:
    if a in INTEGERS and b in INTEGERS:
        return a if _INT_RANK[a] >= _INT_RANK[b] else b
    if {a, b} & {"real", "double"}:
        return "double"
    return "numeric"


def _promote(c: Compiled, to: str) -> Compiled:
    if c.type == to or (c.type in INTEGERS and to in INTEGERS):
        return c if c.type == to else Compiled(to, c.sql, c.fn, c.const)
    conv: Callable[[Any], Any]
    if to == "numeric":
        conv = Decimal
    elif c.type == "numeric":
        conv = _numeric_to_double
    elif c.type == "real":
        conv = _same
    else:
        conv = float
    inner = c.fn
    return Compiled(
        to,
        f"CAST({c.sql} AS {PG_TYPES[to]})",
        lambda r: None if (v := inner(r)) is None else conv(v),
        c.const,
    )


def _same(value: Any) -> Any:
    return value


def _numeric_to_double(value: Decimal) -> float:
    result = float(value)
    if value.is_finite() and result in (float("inf"), float("-inf")):
        raise OperatorError(f"value out of range: overflow ({value})")
    if value.is_finite() and value != 0 and result == 0:
        raise OperatorError(f"value out of range: underflow ({value})")
    return result


def _not(c: Compiled) -> Compiled:
    inner = c.fn
    return Compiled(
        "boolean",
        f"(NOT {c.sql})",
        lambda r: None if (v := inner(r)) is None else not v,
        c.const,
    )


def _and(a: Compiled, b: Compiled) -> Compiled:
    fa, fb = a.fn, b.fn

    def fn(row: Row) -> bool | None:
        x = fa(row)
        if x is False:
            return False
        y = fb(row)
        if y is False:
            return False
        return None if x is None or y is None else True

    return Compiled("boolean", f"({a.sql} AND {b.sql})", fn, a.const and b.const)


def _or(a: Compiled, b: Compiled) -> Compiled:
    fa, fb = a.fn, b.fn

    def fn(row: Row) -> bool | None:
        x = fa(row)
        if x is True:
            return True
        y = fb(row)
        if y is True:
            return True
        return None if x is None or y is None else False

    return Compiled("boolean", f"({a.sql} OR {b.sql})", fn, a.const and b.const)


def _is_null(c: Compiled, negated: bool) -> Compiled:
    inner = c.fn
    if negated:
        return Compiled("boolean", f"({c.sql} IS NOT NULL)", lambda r: inner(r) is not None)
    return Compiled("boolean", f"({c.sql} IS NULL)", lambda r: inner(r) is None)


def _float_key(x: float) -> tuple[int, float]:
    return (1, 0.0) if x != x else (0, x)


def _numeric_key(x: Decimal) -> tuple[int, Decimal]:
    return (1, Decimal(0)) if x.is_nan() else (0, x)


_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _comparison(op: str, left: Compiled, right: Compiled) -> Compiled:
    test = _COMPARE[op]
    fa, fb = left.fn, right.fn
    key: Callable[[Any], Any] | None = None
    if left.type in ("real", "double"):
        key = _float_key
    elif left.type == "numeric":
        key = _numeric_key

    def fn(row: Row) -> bool | None:
        a = fa(row)
        if a is None:
            return None
        b = fb(row)
        if b is None:
            return None
        return test(key(a), key(b)) if key else test(a, b)

    sql_op = "<>" if op == "!=" else op
    collate = ' COLLATE "C"' if left.type == "text" else ""
    sql = f"({left.sql}{collate} {sql_op} {right.sql})"
    return Compiled("boolean", sql, fn, left.const and right.const)


def _negate(c: Compiled) -> Compiled:
    inner = c.fn
    type_ = c.type
    neg: Callable[[Any], Any]
    if type_ in INTEGERS:

        def neg(v: Any) -> Any:
            return check_int(-v, type_)
    elif type_ == "numeric":
        neg = NUMERIC_CTX.minus
    else:

        def neg(v: Any) -> Any:
            return -v

    return Compiled(
        type_, f"(- {c.sql})", lambda r: None if (v := inner(r)) is None else neg(v), c.const
    )


def _arith(op: str, left: Compiled, right: Compiled) -> Compiled:
    type_ = left.type
    compute: Callable[[Any, Any], Any]
    if type_ in INTEGERS:
        compute = _int_op(op, type_)
    elif type_ == "numeric":
        compute = _NUMERIC_OPS[op]
    else:
        compute = _DOUBLE_OPS[op]
    fa, fb = left.fn, right.fn

    def fn(row: Row) -> Any:
        a = fa(row)
        if a is None:
            return None
        b = fb(row)
        if b is None:
            return None
        return compute(a, b)

    sql = f"({left.sql} {op} {right.sql})"
    return Compiled(type_, sql, fn, left.const and right.const)


def _int_op(op: str, type_: str) -> Callable[[int, int], int]:
    def compute(a: int, b: int) -> int:
        if op == "+":
            return check_int(a + b, type_)
        if op == "-":
            return check_int(a - b, type_)
        if op == "*":
            return check_int(a * b, type_)
        if b == 0:
            raise OperatorError("division by zero")
        if op == "/":
            q = abs(a) // abs(b)
            return check_int(q if (a < 0) == (b < 0) else -q, type_)
        r = abs(a) % abs(b)
        return -r if a < 0 else r

    return compute


def _check_double(result: float, a: float, b: float, zero_ok: bool) -> float:
    inf = float("inf")
    if result in (inf, -inf) and a not in (inf, -inf) and b not in (inf, -inf):
        raise OperatorError("value out of range: overflow")
    if result == 0 and not zero_ok and a != 0:
        raise OperatorError("value out of range: underflow")
    return result


def _double_div(a: float, b: float) -> float:
    if b == 0:
        if a != a:
            return a
        raise OperatorError("division by zero")
    return _check_double(a / b, a, b, b in (float("inf"), float("-inf")))


_DOUBLE_OPS: dict[str, Callable[[float, float], float]] = {
    "+": lambda a, b: _check_double(a + b, a, b, True),
    "-": lambda a, b: _check_double(a - b, a, b, True),
    "*": lambda a, b: _check_double(a * b, a, b, a == 0 or b == 0),
    "/": _double_div,
}


def _numeric_special(op: str, a: Decimal, b: Decimal) -> Decimal:
    """NaN and infinities: PostgreSQL follows IEEE float rules here."""
    x, y = float(a), float(b)
    if op == "/" and b == 0 and not a.is_nan():
        raise OperatorError("division by zero")
    if op == "%":
        if a.is_nan() or b.is_nan() or a.is_infinite():
            return Decimal("NaN")
        if b == 0:
            raise OperatorError("division by zero")
        return a
    if op == "/":
        result = x / y if y != 0 else float("nan")
    else:
        result = {"+": x + y, "-": x - y, "*": x * y}[op]
    return Decimal(result) if result == result else Decimal("NaN")


def _numeric_div(a: Decimal, b: Decimal) -> Decimal:
    if b == 0:
        raise OperatorError("division by zero")
    scale = _div_scale(a, b)
    sa, da, ea = a.as_tuple()
    sb, db, eb = b.as_tuple()
    assert isinstance(ea, int) and isinstance(eb, int)
    ia = int("".join(map(str, da)))
    ib = int("".join(map(str, db)))
    # a/b * 10^scale = ia * 10^(ea - eb + scale) / ib, rounded half away from zero.
    shift = ea - eb + scale
    num, den = (ia * 10**shift, ib) if shift >= 0 else (ia, ib * 10 ** (-shift))
    q, r = divmod(num, den)
    if 2 * r >= den:
        q += 1
    negative = bool(sa) != bool(sb) and q != 0
    return Decimal((1 if negative else 0, tuple(int(d) for d in str(q)), -scale))


def _weight_first(d: Decimal) -> tuple[int, int]:
    """PostgreSQL's base-10000 weight and first digit of a numeric."""
    if d == 0:
        return 0, 0
    weight = d.adjusted() // 4
    first = int(NUMERIC_CTX.scaleb(abs(d), -4 * weight))
    return weight, first


def _dscale(d: Decimal) -> int:
    exponent = d.as_tuple().exponent
    assert isinstance(exponent, int)
    return max(0, -exponent)


def _div_scale(a: Decimal, b: Decimal) -> int:
    w1, f1 = _weight_first(a)
    w2, f2 = _weight_first(b)
    qweight = w1 - w2 - (1 if f1 <= f2 else 0)
    scale = max(16 - qweight * 4, _dscale(a), _dscale(b), 0)
    return min(scale, 1000)


def _numeric_op(op: str) -> Callable[[Decimal, Decimal], Decimal]:
    def compute(a: Decimal, b: Decimal) -> Decimal:
        if not (a.is_finite() and b.is_finite()):
            return _numeric_special(op, a, b)
        if op == "+":
            return NUMERIC_CTX.add(a, b)
        if op == "-":
            return NUMERIC_CTX.subtract(a, b)
        if op == "*":
            return NUMERIC_CTX.multiply(a, b)
        if op == "/":
            return _numeric_div(a, b)
        if b == 0:
            raise OperatorError("division by zero")
        return NUMERIC_CTX.remainder(a, b)

    return compute


_NUMERIC_OPS = {op: _numeric_op(op) for op in "+-*/%"}


def column_refs(columns: Sequence[tuple[str, str]]) -> dict[str, Compiled]:
    """Compiled references to the staging relation's columns, by position."""
    return {
        name: Compiled(type_, quote_ident(name), itemgetter(i))
        for i, (name, type_) in enumerate(columns)
    }
