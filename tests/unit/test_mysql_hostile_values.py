"""A hostile MySQL server's values: a value its column's type cannot hold
is a ValueFault naming the column and row, never an unclassified error."""

from __future__ import annotations

from typing import Any

import pytest

from setu_engine.errors import ValueFault
from setu_engine.providers.mysql import types as mysql_types
from setu_engine.values.types import Column

# What no real server sends for the column, and a hostile one may.
CASES = [
    pytest.param(mysql_types.REAL, Column("f", "real"), 1e300, id="float-past-float32"),
    pytest.param(
        mysql_types.JSON, Column("j", "json"), "[" * 100_000 + "]" * 100_000, id="json-too-deep"
    ),
]


@pytest.mark.parametrize(("kind", "column", "value"), CASES)
def test_value_a_column_cannot_hold_is_a_value_fault(kind: str, column: Column, value: Any) -> None:
    read = mysql_types.row_reader("s", [column], [kind])
    with pytest.raises(ValueFault) as caught:
        read([(value,)], 4)
    assert caught.value.column == column.name
    assert "row 5" in str(caught.value)
