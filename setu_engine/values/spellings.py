"""How Setu's text formats spell the values that have no obvious spelling
(docs/data-types.md, "Values and spellings per format").

The one source both JSON Lines writers read, so they cannot drift apart:
the Python encoder (setu_engine/providers/files/encode.py, through
setu_engine/values/special.py) and the SQL that has PostgreSQL render each
line itself (setu_engine/providers/postgres/json.py). CSV and SQLite's
text use the same words, unquoted. Readers accept these and more (any case,
`inf`, `+infinity`); writers print exactly these.

Both writers look the names up when they run (`spellings.NAN`, not a copy
taken at import), so a test that changes one here sees both follow.
"""

from __future__ import annotations

from typing import Final

# Non-finite real, double and numeric: JSON strings in JSON Lines (JSON has
# no such numbers), bare words in CSV.
NAN: Final = "NaN"
INFINITY: Final = "Infinity"
MINUS_INFINITY: Final = "-Infinity"

# A negative zero double or real: JSON's `-0` is an integer zero to most
# readers, so the sign travels as a float's. Python prints a float's -0 so
# already; the SQL path maps PostgreSQL's `-0` to this.
NEGATIVE_ZERO: Final = "-0.0"

# ±infinity of date, timestamp and timestamptz (lower case: PostgreSQL's own).
DATE_INFINITY: Final = "infinity"
DATE_MINUS_INFINITY: Final = "-infinity"

# JSON's null: SQL NULL of any column but json (JSON Lines), and a json value
# that is JSON's null (both formats). A json column's SQL NULL leaves its key
# out of a JSON Lines line, and is an empty CSV field like any SQL NULL.
NULL: Final = "null"
