from __future__ import annotations

import pytest

from setu_server.store.migrate import migrations
from setu_server.store.queries import QUERIES, Queries


def test_named_queries_are_split_by_header() -> None:
    queries = Queries({"a.sql": "-- name: one\n-- $1 x\nSELECT $1;\n\n-- name: two\nSELECT 2;\n"})
    assert queries.one == "-- $1 x\nSELECT $1;"
    assert queries.two == "SELECT 2;"
    with pytest.raises(AttributeError, match="three"):
        _ = queries.three


def test_a_name_defined_twice_is_an_error() -> None:
    with pytest.raises(ValueError, match="twice"):
        Queries({"a.sql": "-- name: one\nSELECT 1;", "b.sql": "-- name: one\nSELECT 2;"})


def test_every_query_documents_its_parameters() -> None:
    for name, sql in QUERIES.items():
        header = [line for line in sql.splitlines() if line.startswith("--")]
        assert header, f"query {name} has no header comment"
        if "$1" in sql.replace("--", "", 1) and not any("$1" in line for line in header):
            pytest.fail(f"query {name} uses $1 but its header does not name it")


def test_migrations_are_numbered_without_gaps() -> None:
    versions = [v for v, _, _ in migrations()]
    assert versions == list(range(1, len(versions) + 1))
