"""JSON Lines rendered by PostgreSQL itself, for PostgreSQL → JSON Lines
without operators (append or overwrite): the server turns each row into its
line in C, in its own process, and the engine only writes the bytes, where
decoding every value into Python and encoding it again would cost three
times as long.

The lines spell every value as Setu's own JSON Lines writer does
(setu_engine/providers/files/encode.py, docs/data-types.md), both
reading the special values' spellings from setu_engine/values/spellings.py;
the fidelity suite checks this path against that writer:

- numbers by their output functions (numeric's exact digits, real's and
  double's shortest digits, -0 kept), NaN and ±Infinity as JSON strings;
  ±infinity of dates and timestamps as JSON strings;
- timestamptz in UTC (the read transaction sets TimeZone) as ISO 8601 with
  its offset, timestamp, date and time in ISO 8601;
- bytea as base64 (one line: encode() breaks its output every 76 characters);
- a json column's SQL NULL leaves its key out; its JSON null is `null`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from setu_engine.values import spellings
from setu_engine.values.types import Column

# PostgreSQL functions take at most 100 arguments: concat_ws gets them in
# groups.
_GROUP = 90


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _piece(column: Column) -> str:
    """The column's `"name":value` text; NULL where the key is left out."""
    key = _literal(json.dumps(column.name, ensure_ascii=False) + ":")
    ref = f"t.{_quote(column.name)}"
    if column.type == "json":
        return f"({key} || {ref}::text)"  # NULL (left out) when SQL NULL
    if column.type == "bytes":
        value = f"to_json(translate(encode({ref}, 'base64'), E'\\n', ''))::text"
    elif column.type in ("real", "double", "numeric"):
        value = _number(ref)
    elif column.type in _INFINITE_TYPES:
        value = _temporal(ref)
    else:
        value = f"to_json({ref})::text"
    return f"({key} || coalesce({value}, {_literal(spellings.NULL)}))"


_INFINITE_TYPES = ("date", "timestamp", "timestamptz")


def _number(ref: str) -> str:
    """A real, double or numeric by its output function (numeric's exact
    digits), whose special values (PostgreSQL's text on the left) take
    Setu's spellings: to_json would write a double's NaN and ±Infinity as
    bare words (not JSON) and drop the sign of -0 (JSON's -0 is an integer
    zero; a numeric has no -0)."""
    special = {
        "NaN": json.dumps(spellings.NAN),
        "Infinity": json.dumps(spellings.INFINITY),
        "-Infinity": json.dumps(spellings.MINUS_INFINITY),
        "-0": spellings.NEGATIVE_ZERO,
    }
    cases = " ".join(f"WHEN {_literal(pg)} THEN {_literal(ours)}" for pg, ours in special.items())
    return f"CASE {ref}::text {cases} ELSE {ref}::text END"


def _temporal(ref: str) -> str:
    """ISO 8601 by to_json, but ±infinity in Setu's spelling (the same
    words as to_json's today, yet chosen in one place for both writers)."""
    spelled = {
        "infinity": json.dumps(spellings.DATE_INFINITY),
        "-infinity": json.dumps(spellings.DATE_MINUS_INFINITY),
    }
    cases = " ".join(
        f"WHEN {ref} = {_literal(pg)} THEN {_literal(ours)}" for pg, ours in spelled.items()
    )
    return f"CASE {cases} ELSE to_json({ref})::text END"


def line_sql(columns: Sequence[Column], query: str) -> str:
    """A query of one text column: each row of `query` (which selects the
    columns, as their neutral types) as its JSON Lines line, sans newline."""
    pieces = [_piece(c) for c in columns]
    groups = [
        f"nullif(concat_ws(',', {', '.join(pieces[i : i + _GROUP])}), '')"
        for i in range(0, len(pieces), _GROUP)
    ]
    body = groups[0] if len(groups) == 1 else f"concat_ws(',', {', '.join(groups)})"
    return f"SELECT '{{' || coalesce({body}, '') || '}}' FROM ({query}) AS t"


def unescape(data: bytes) -> bytes:
    """COPY's text format doubles every backslash; a JSON line holds no tab,
    newline or carriage return of its own (JSON escapes them), so that is
    the only escape to undo."""
    return data.replace(b"\\\\", b"\\")
