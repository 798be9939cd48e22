"""The filter language: tokenizer and parser errors, precedence, typing and
three-valued evaluation (the SQL side is checked in test_operators_sql)."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import pytest

from setu_engine.errors import ExprError, OperatorError
from setu_engine.filters.expr import (
    Between,
    Binary,
    InList,
    IsNull,
    Literal,
    Name,
    Unary,
    names,
    parse,
    tokenize,
)
from setu_engine.filters.expr_compile import column_refs, compile_filter
from setu_engine.operators.chain import cast_literal


def run(text: str, columns: list[tuple[str, str]], row: tuple[Any, ...]) -> Any:
    compiled = compile_filter(parse(text), column_refs(columns), cast_literal)
    return compiled.fn(row)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a = 1 and b = 'x' $", "unexpected '$' at 19"),
        ("__import__('os')", "unexpected '(' at 11"),
        ("os.system", "unexpected '.' at 3"),
        ("a[0] = 1", "unexpected '[' at 2"),
        ("a = ", "unexpected end of filter at 5"),
        ("a < b < c", "unexpected '<' at 7"),
        ("(a = 1", "unexpected end of filter at 7"),
        ("a = 'open", 'unexpected "\'" at 5'),
        ("12abc = 1", "unexpected 'a' at 3"),
        ("a is 1", "unexpected '1' at 6"),
        ("a not like 'x'", "unexpected 'like' at 7"),
        ("lambda: 1", "unexpected ':' at 7"),
    ],
)
def test_syntax_errors_name_the_token_and_position(text: str, message: str) -> None:
    with pytest.raises(ExprError) as info:
        parse(text)
    assert str(info.value) == message


def test_tokens_and_keywords_are_case_insensitive() -> None:
    kinds = [(t.kind, t.text) for t in tokenize('A AND "and" <> 1.5e3')]
    assert kinds == [
        ("name", "A"),
        ("keyword", "and"),
        ("quoted", '"and"'),
        ("op", "<>"),
        ("number", "1.5e3"),
        ("end", ""),
    ]


def test_precedence_or_and_not_comparison_arithmetic() -> None:
    node = parse("not a = 1 + 2 * 3 or b and c")
    assert node == Binary(
        "or",
        Unary(
            "not",
            Binary(
                "=",
                Name("a", 5),
                Binary(
                    "+",
                    Literal("int", 1, 9),
                    Binary("*", Literal("int", 2, 13), Literal("int", 3, 17), 15),
                    11,
                ),
                7,
            ),
            1,
        ),
        Binary("and", Name("b", 22), Name("c", 28), 24),
        19,
    )


def test_predicates_parse() -> None:
    assert isinstance(parse("a is not null"), IsNull)
    node = parse("a not in (1, 'x', null)")
    assert isinstance(node, InList) and node.negated and len(node.items) == 3
    node = parse("a between 1 and 2 and b")
    assert isinstance(node, Binary) and isinstance(node.left, Between)
    assert parse("x = 'it''s'") == Binary("=", Name("x", 1), Literal("string", "it's", 5), 3)
    assert parse('"we ""q"" it" = 1.50').left == Name('we "q" it', 1)  # type: ignore[union-attr]
    assert parse("a = 1.50").right == Literal("numeric", Decimal("1.50"), 5)  # type: ignore[union-attr]
    assert names(parse("a + b > c or d in (e)")) == ["a", "b", "c", "d", "e"]


NULL = None
AND = {
    (True, True): True,
    (True, False): False,
    (True, NULL): NULL,
    (False, False): False,
    (False, NULL): False,
    (NULL, NULL): NULL,
}
OR = {
    (True, True): True,
    (True, False): True,
    (True, NULL): True,
    (False, False): False,
    (False, NULL): NULL,
    (NULL, NULL): NULL,
}


@pytest.mark.parametrize(("pair", "expected"), list(AND.items()))
def test_and_is_three_valued(pair: tuple[Any, Any], expected: Any) -> None:
    columns = [("a", "boolean"), ("b", "boolean")]
    assert run("a and b", columns, pair) is expected
    assert run("b and a", columns, pair) is expected


@pytest.mark.parametrize(("pair", "expected"), list(OR.items()))
def test_or_is_three_valued(pair: tuple[Any, Any], expected: Any) -> None:
    columns = [("a", "boolean"), ("b", "boolean")]
    assert run("a or b", columns, pair) is expected
    assert run("b or a", columns, pair) is expected


@pytest.mark.parametrize(
    ("text", "row", "expected"),
    [
        ("not a", (None,), None),
        ("a = null", (1,), None),
        ("a is null", (None,), True),
        ("a in (1, 2)", (None,), None),
        ("a in (1, null)", (1,), True),
        ("a in (2, null)", (1,), None),
        ("a not in (2, null)", (1,), None),
        ("a not in (2, 3)", (1,), True),
        ("a between 1 and 3", (3,), True),
        ("a not between 1 and 3", (4,), True),
        ("a between null and 3", (4,), False),
        ("-7 / 2 = a", (-3,), True),
        ("-7 % 2 = a", (-1,), True),
        ("a * 2 + 1 = 7", (3,), True),
        ("a / 2.0 = 1.5", (3,), True),
        ("a + 0.1 > 3", (3,), True),
    ],
)
def test_evaluation(text: str, row: tuple[Any, ...], expected: Any) -> None:
    column = [("a", "boolean")] if text == "not a" else [("a", "integer")]
    assert run(text, column, row) is expected


def test_numbers_strings_and_nan_compare_like_postgres() -> None:
    assert run("d = d", [("d", "double")], (float("nan"),)) is True
    assert run("d > 1e308", [("d", "double")], (float("nan"),)) is True
    assert run("n > 5", [("n", "numeric")], (Decimal("NaN"),)) is True
    assert run("s < 'a'", [("s", "text")], ("Z",)) is True  # code point order
    assert run("n / 3 = 0.33333333333333333333", [("n", "numeric")], (Decimal(1),)) is True
    assert run("t >= '2024-01-01'", [("t", "date")], (None,)) is None


def test_runtime_errors() -> None:
    with pytest.raises(OperatorError, match="division by zero"):
        run("a / b = 1", [("a", "integer"), ("b", "integer")], (1, 0))
    with pytest.raises(OperatorError, match="smallint out of range"):
        run("a * a > 0", [("a", "smallint")], (300,))
    with pytest.raises(OperatorError, match="overflow"):
        run("d * d > 0", [("d", "double")], (1e200,))
    # and/or stop at the first deciding operand, as PostgreSQL's executor does
    assert run("b <> 0 and a / b > 0", [("a", "integer"), ("b", "integer")], (1, 0)) is False


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("s = 1", "cannot compare text with integer at 3"),
        ("n = 'x'", "cannot read 'x' as integer at 3"),
        ("d >= '2024-13-01'", "cannot read '2024-13-01' as date"),
        ("s + 1 > 2", "'+' at 3 needs numbers, not a text value"),
        ("n", "a filter must be a condition, not a integer value"),
        ("f % 2 = 1", "'%' at 3 needs integers or numerics"),
        ("j = j", "cannot compare json values at 3"),
        ("nope = 1", "unknown column 'nope' at 1 (columns: s, n, d, f, j)"),
        ("1 / 0 = 1", "division by zero"),
    ],
)
def test_type_errors(text: str, message: str) -> None:
    columns = [("s", "text"), ("n", "integer"), ("d", "date"), ("f", "double"), ("j", "json")]
    with pytest.raises(ExprError, match=re.escape(message)):
        compile_filter(parse(text), column_refs(columns), cast_literal)


def test_sql_quotes_identifiers_and_literals() -> None:
    columns = [('we"ird', "text")]
    compiled = compile_filter(
        parse("\"we\"\"ird\" = 'a''b\\c'"), column_refs(columns), cast_literal
    )
    assert compiled.sql == '("we""ird" COLLATE "C" = CAST(E\'a\'\'b\\\\c\' AS text))'
