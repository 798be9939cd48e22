"""Views (and generated columns) of a tenant's DuckDB file that would show
the runtime rather than the file's data; refused in the cloud.

The sandbox (external access off, configuration locked) keeps a session
from reaching other files, but not from describing itself: a view over
`duckdb_settings()`, `current_setting('temp_directory')`,
`duckdb_databases()` or `pg_catalog.pg_settings` reads, from inside the
sandbox, the file's full path (the files root and workspace id), the
runtime user's home folder (`secret_directory`), the host's platform and
free disk space. A tenant's file may hold such a view, so a read in the
cloud first checks what the relation it selects from evaluates:

- a view: its definition;
- a table: the expressions of its generated columns (evaluated on read);
- transitively, the definitions of the file's other views and macros that
  those name (a view over a macro over `duckdb_settings()`).

A definition is refused when it calls a function of the session's own
catalog or settings (any `duckdb_*` or `pragma_*` table function,
`current_setting`, `getvariable`, `which_secret`, `pg_settings`), or
one that runs SQL given as a string (`query`, `query_table`,
`json_execute_serialized_sql`), whose target no reading of the definition
can know. The match is on the definition's text, lowercased, so it errs on
the side of refusing (a string literal naming such a function refuses its
view too); names are compared without their schema for the same reason.
"""

from __future__ import annotations

import re

import duckdb

from setu_engine.errors import PermanentError

# Functions, as called (a name, maybe quoted, then its parenthesis); and
# pg_catalog's one view over the settings, as named.
_EXPOSING = re.compile(
    r"(?<![\w$])(?:"
    r"(?:duckdb_\w+|pragma_\w+|current_setting|getvariable|which_secret|getenv"
    r"|query|query_table|json_execute_serialized_sql|sql_auto_complete)\"?\s*\("
    r"|pg_settings(?![\w$]))"
)

_DEFINITIONS = (
    "SELECT view_name, sql FROM duckdb_views() "
    "WHERE database_name = current_database() AND NOT internal "
    "UNION ALL SELECT function_name, macro_definition FROM duckdb_functions() "
    "WHERE database_name = current_database() AND NOT internal "
    "AND function_type IN ('macro', 'table_macro') "
    "UNION ALL SELECT table_name, generation_expression FROM duckdb_columns() "
    "WHERE database_name = current_database() AND is_generated"
)


def _mentions(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w$]){re.escape(name)}(?![\w$])", text) is not None


def exposing(conn: duckdb.DuckDBPyConnection) -> set[str]:
    """The (lowercased) names of the file's views, macros and tables with
    generated columns whose evaluation reaches the session's settings or
    catalog, directly or through another such name."""
    texts: dict[str, str] = {}
    for name, text in conn.execute(_DEFINITIONS).fetchall():
        key = str(name).lower()
        texts[key] = texts.get(key, "") + "\n" + str(text or "").lower()
    flagged = {name for name, text in texts.items() if _EXPOSING.search(text)}
    changed = True
    while changed:
        changed = False
        for name, text in texts.items():
            if name not in flagged and any(_mentions(text, f) for f in flagged):
                flagged.add(name)
                changed = True
    return flagged


def refuse_exposing(conn: duckdb.DuckDBPyConnection, table: str) -> None:
    """PermanentError when reading `table` would evaluate a definition
    that shows the runtime (see the module's doc)."""
    if table.lower() in exposing(conn):
        raise PermanentError(
            f"duckdb: {table!r} is a view (or has generated columns) that reads DuckDB's own "
            "settings or catalog, or runs SQL from a string (duckdb_settings(), "
            "current_setting(), query() …), which a cloud connection may not read: select "
            "the tables it reads from instead"
        )
