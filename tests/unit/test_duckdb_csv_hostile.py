"""CSV a source server sent that does not parse as text at all (a record
of another width, bytes that are not UTF-8: a SQL_ASCII database's, or a
hostile server's) is a ValueFault naming the table, not Arrow's own error."""

from __future__ import annotations

import pytest

from setu_engine.errors import ValueFault
from setu_engine.providers.duckdb import csv as duck_csv
from setu_engine.values.types import Column

COLUMNS = [Column("a", "integer"), Column("b", "text")]


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"1,x\n2,y,z\n", id="wider-record"),
        pytest.param(b"1,\xff\xfe\n", id="not-utf8"),
    ],
)
def test_unparseable_batch_is_a_value_fault(data: bytes) -> None:
    with pytest.raises(ValueFault, match="'t'"):
        duck_csv.arrow_table("t", COLUMNS, data)
