"""JSON Lines rendered by PostgreSQL itself, for PostgreSQL → JSON Lines
without operators (append or overwrite): the server turns each row into its
line in C, in its own process, and the engine only writes the bytes, where
decoding every value into Python and encoding it again would cost three
times as long.

The lines spell every value as Setu's own JSON Lines writer does
(providers/files_encode.py, docs/data-types.md), which the fidelity suite
checks on this path too:

- numbers by their output functions (numeric's exact digits, real's and
  double's shortest digits, -0 kept), NaN and ±Infinity as the strings "NaN",
  "Infinity", "-Infinity"; ±infinity of dates and timestamps as "infinity"
  and "-infinity" (to_json's own spellings);
- timestamptz in UTC (the read transaction sets TimeZone) as ISO 8601 with
  its offset, timestamp, date and time in ISO 8601;
- bytea as base64 (one line: encode() breaks its output every 76 characters);
- a json column's SQL NULL leaves its key out; its JSON null is `null`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from setu_agent.engine.types import Column

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
    elif column.type in ("real", "double"):
        # to_json drops the sign of -0, and JSON's -0 is an integer zero:
        # -0.0 keeps it.
        value = (
            f"CASE WHEN {ref}::text IN ('NaN', 'Infinity', '-Infinity') "
            f"THEN '\"' || {ref}::text || '\"' WHEN {ref}::text = '-0' THEN '-0.0' "
            f"ELSE {ref}::text END"
        )
    else:
        value = f"to_json({ref})::text"
    return f"({key} || coalesce({value}, 'null'))"


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
