"""Reading CSV for the `file` provider: the options a CSV file needs
(delimiter, quote, header or given names, null markers, encoding), records
parsed a chunk at a time, column types inferred from every value (or from a
declared sample), and records turned into typed rows.

Inference (docs/files.md, "Type inference"): each column's values are read
once and its type widened as they come, in constant memory:

    integer (smallint → integer → bigint → numeric by the values' range)
      → numeric (a decimal, or NaN/Infinity among numbers)
    boolean (true/false, t/f)
    date → timestamp → timestamptz (any value with an offset)
    time
    uuid
    anything else, or a mix of the above → text

By default the whole file is read to infer (a second pass reads the rows),
so a decimal on row 2,053 widens its column instead of failing it. With
`csv.infer_rows: N` only the first N rows are read, integers are taken as
bigint (a sample cannot bound the rest), and a later value that does not fit
fails the run, naming its row, column and value.
"""

from __future__ import annotations

import codecs
import csv
import io
import re
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from datetime import date, datetime, time
from typing import Any

from setu_engine.errors import ConfigError, PermanentError, ValueFault
from setu_engine.providers.files.codec import _check_header, _dropped, _Source, from_text
from setu_engine.values.special import INFINITIES, NONFINITE_TEXTS
from setu_engine.values.types import Column, Row

# Markers that read as NULL in a column that is not text, unless the
# config lists its own `null_values` (which then hold in every column, and
# decide whether an empty field in a text column is NULL or '').
DEFAULT_MARKERS = frozenset({"NA", "N/A", "NULL", "null"})
OPTIONS = ("delimiter", "quote", "header", "column_names", "null_values", "encoding", "infer_rows")
# A quoted field may span lines; one open this long is a stray quote.
MAX_OPEN_FIELD = 16 * 1024 * 1024
# Python's csv refuses a field over 128 KiB by default, and Setu writes
# text of any length (a document, a JSON value). The limit is the csv
# module's, process-wide: it is only ever raised here.
FIELD_LIMIT = 2**31 - 1
csv.field_size_limit(max(csv.field_size_limit(), FIELD_LIMIT))

# ---------------------------------------------------------------- options


@dataclass(frozen=True)
class CsvOptions:
    delimiter: str = ","
    quote: str | None = '"'  # None: no quoting, every line is one record
    header: bool = True
    # Names of a headerless file's columns: for every file, or per stream.
    column_names: tuple[str, ...] | dict[str, tuple[str, ...]] | None = None
    # None: "" is NULL everywhere and DEFAULT_MARKERS in typed columns.
    null_values: frozenset[str] | None = None
    encoding: str = "utf-8"
    infer_rows: int | None = None  # None: the whole file

    def names_for(self, stream: str) -> tuple[str, ...] | None:
        if isinstance(self.column_names, dict):
            return self.column_names.get(stream)
        return self.column_names

    def nulls_for(self, type_: str) -> frozenset[str]:
        """The fields that read as NULL in a column of the type. An empty
        field is NULL in any column but text, where it can mean ''."""
        markers = DEFAULT_MARKERS if self.null_values is None else self.null_values
        if type_ == "text":
            return frozenset({""}) if self.null_values is None else self.null_values
        if type_ == "json" and self.null_values is None:
            # `null` in a json column is JSON's null, as Setu writes it
            # (docs/data-types.md); SQL NULL is the empty field.
            return (markers - {"null"}) | {""}
        return markers | {""}


def parse_options(options: Any) -> CsvOptions:
    """config.csv's meaning; raises ConfigError naming the key at fault."""
    if not isinstance(options, dict):
        raise ConfigError(f"config.csv must be an object with any of {', '.join(OPTIONS)}")
    if extra := sorted(set(options) - set(OPTIONS)):
        raise ConfigError(f"config.csv.{extra[0]} is not a CSV option; use {', '.join(OPTIONS)}")
    delimiter = options.get("delimiter", ",")
    if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in "\r\n":
        raise ConfigError("config.csv.delimiter must be one character (not a newline)")
    quote = _quote(options.get("quote", '"'), delimiter)
    header = options.get("header", True)
    if not isinstance(header, bool):
        raise ConfigError("config.csv.header must be true or false")
    names = _column_names(options.get("column_names"), header)
    return CsvOptions(
        delimiter=delimiter,
        quote=quote,
        header=header,
        column_names=names,
        null_values=_null_values(options.get("null_values")),
        encoding=_encoding(options.get("encoding", "utf-8")),
        infer_rows=_infer_rows(options.get("infer_rows", "all")),
    )


def _quote(quote: Any, delimiter: str) -> str | None:
    if quote is None or quote == "":
        return None
    if not isinstance(quote, str) or len(quote) != 1 or quote in "\r\n" or quote == delimiter:
        raise ConfigError(
            'config.csv.quote must be one character other than the delimiter (default "), '
            'or "" for a file that quotes nothing'
        )
    return quote


def _names(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(n, str) for n in value):
        raise ConfigError(f"{where} must be a non-empty list of column names")
    if any(not n for n in value) or len(set(value)) != len(value):
        raise ConfigError(f"{where} must name every column once, none empty")
    return tuple(value)


def _column_names(value: Any, header: bool) -> tuple[str, ...] | dict[str, tuple[str, ...]] | None:
    if value is None:
        return None
    if header:
        raise ConfigError(
            "config.csv.column_names applies to files without a header: set config.csv.header "
            "to false, or leave column_names out to take the names from the header"
        )
    if isinstance(value, dict):
        return {
            str(stream): _names(names, f"config.csv.column_names.{stream}")
            for stream, names in value.items()
        }
    return _names(value, "config.csv.column_names")


def _null_values(value: Any) -> frozenset[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError('config.csv.null_values must be a list of strings, e.g. ["", "NA"]')
    return frozenset(value)


def _encoding(value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError("config.csv.encoding must be an encoding name, e.g. utf-8 or latin-1")
    try:
        name = codecs.lookup(value).name
    except LookupError as exc:
        raise ConfigError(f"config.csv.encoding: unknown encoding {value!r}") from exc
    # Lines are split on the byte \n before decoding: UTF-16 and UTF-32
    # spell a newline otherwise.
    if "\n".encode(name) != b"\n" or '"'.encode(name) != b'"':
        raise ConfigError(
            f"config.csv.encoding: {value} is not read line by line (a newline is not one "
            f"byte); convert the file to UTF-8"
        )
    return name


def _infer_rows(value: Any) -> int | None:
    if value == "all":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            'config.csv.infer_rows must be "all" (the default: the whole file) or a number '
            "of rows of at least 1"
        )
    return value


# ---------------------------------------------------------------- records

Records = AsyncGenerator[list[tuple[int, list[str]]], None]


async def csv_records(
    chunks: AsyncGenerator[list[bytes], None], options: CsvOptions, source: _Source
) -> Records:
    """(line number, fields) of each record, a chunk of lines at a time. A
    chunk is cut after its last line where the count of quote characters so
    far is even (doubled quotes inside a field keep it even), so a quoted
    field may hold newlines and span chunks. A quote inside an unquoted
    field (`5'11"`) is text: it makes the count odd, so the lines after it
    wait (up to MAX_OPEN_FIELD) until the parser says where records end."""
    quote = options.quote.encode(options.encoding) if options.quote else b""
    carry: list[bytes] = []
    line = 0  # the number of the line before carry's first
    async with aclosing(chunks):
        async for lines in chunks:
            lines = carry + lines
            cut = _cut(lines, quote)
            if cut < len(lines) and sum(map(len, lines[cut:])) > MAX_OPEN_FIELD:
                cut = _closed(lines, options, source, line)
            records = _parse(lines[:cut], options, source, line)
            line += cut
            carry = lines[cut:]
            yield records
    if carry:
        _closed(carry, options, source, line)
        yield _parse(carry, options, source, line)


def _closed(lines: list[bytes], options: CsvOptions, source: _Source, before: int) -> int:
    """len(lines) when they parse as whole records (a stray quote made the
    count odd); else the field left open is an error."""
    try:
        _parse(lines, options, source, before)
    except PermanentError as exc:
        if "unexpected end of data" not in str(exc.__cause__):
            raise
        raise PermanentError(
            f"{source.where}: a quoted field opened on line {before + 1} or after is never "
            f"closed: a stray quote character? (config.csv.quote)"
        ) from exc
    return len(lines)


def _cut(lines: list[bytes], quote: bytes) -> int:
    """How many of lines end complete records."""
    if not quote:
        return len(lines)
    odd = sum(line.count(quote) for line in lines) % 2
    cut = len(lines)
    while odd and cut:
        cut -= 1
        odd ^= lines[cut].count(quote) % 2
    return cut


def _parse(
    lines: list[bytes], options: CsvOptions, source: _Source, before: int
) -> list[tuple[int, list[str]]]:
    if not lines:
        return []
    text = _decode(lines, options.encoding, source, before)
    if before == 0:
        text = text.removeprefix("\ufeff")
    reader = csv.reader(
        io.StringIO(text, newline=""),
        delimiter=options.delimiter,
        quotechar=options.quote or '"',
        quoting=csv.QUOTE_MINIMAL if options.quote else csv.QUOTE_NONE,
        strict=True,
    )
    records: list[tuple[int, list[str]]] = []
    start = before + 1
    try:
        for fields in reader:
            records.append((start, fields))
            start = before + reader.line_num + 1
    except csv.Error as exc:
        raise PermanentError(f"{source.where}: line {start}: {exc}") from exc
    return records


def _decode(lines: list[bytes], encoding: str, source: _Source, before: int) -> str:
    data = b"".join(lines)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError:
        pass
    for number, raw in enumerate(lines, start=before + 1):
        try:
            raw.decode(encoding)
        except UnicodeDecodeError as exc:
            raise PermanentError(
                f"{source.where}: line {number}: not {encoding} ({exc.reason}); set "
                f"config.csv.encoding to the file's encoding"
            ) from exc
    raise PermanentError(f"{source.where}: not {encoding}; set config.csv.encoding")


def header_names(first: list[str], options: CsvOptions, source: _Source) -> list[str]:
    """The column names of a file whose first record is `first`."""
    if options.header:
        names = list(first)
    elif given := options.names_for(source.stream):
        if len(first) > len(given):
            raise PermanentError(
                f"{source.where}: a record has {len(first)} fields but config.csv.column_names "
                f"names {len(given)} columns"
            )
        names = list(given)
    else:
        names = [f"c{i + 1}" for i in range(len(first))]
    _check_header(names, source)
    return names


# ---------------------------------------------------------------- inference

_INT = re.compile(r"[+-]?(0|[1-9]\d*)", re.ASCII)  # a leading zero keeps a code as text
_DECIMAL = re.compile(r"[+-]?(0|[1-9]\d*)?(\.\d+)?([eE][+-]?\d+)?", re.ASCII)
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)
_STAMP = re.compile(
    r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?)"
    r"(?P<zone>Z|[+-]\d{2}(?::?\d{2})?)?",
    re.ASCII,
)
_UUID = re.compile(r"[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}", re.ASCII)
_TIME = re.compile(r"\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?", re.ASCII)
_BOOLEANS = frozenset({"true", "false", "t", "f"})
_NONFINITE = frozenset(t.lower() for t in NONFINITE_TEXTS) | {"inf", "-inf", "+infinity", "nan"}
_WIDTHS = (("smallint", 2**15), ("integer", 2**31), ("bigint", 2**63))

# What two kinds of value make together; a pair not listed makes text.
_JOIN: dict[frozenset[str], str] = {
    frozenset({"int", "decimal"}): "decimal",
    frozenset({"int", "nonfinite"}): "decimal",
    frozenset({"decimal", "nonfinite"}): "decimal",
    frozenset({"date", "timestamp"}): "timestamp",
    frozenset({"date", "timestamptz"}): "timestamptz",
    frozenset({"timestamp", "timestamptz"}): "timestamptz",
    frozenset({"infinite", "int"}): "decimal",
    frozenset({"infinite", "decimal"}): "decimal",
    frozenset({"infinite", "nonfinite"}): "decimal",
    frozenset({"infinite", "date"}): "date",
    frozenset({"infinite", "timestamp"}): "timestamp",
    frozenset({"infinite", "timestamptz"}): "timestamptz",
}
_FINAL = {
    "decimal": "numeric",
    "nonfinite": "numeric",  # a column of NaN and Infinity: a float's, as Setu writes them
    "boolean": "boolean",
    "date": "date",
    "timestamp": "timestamp",
    "timestamptz": "timestamptz",
    "time": "time",
    "uuid": "uuid",
}


def kind_of(text: str) -> str:
    """The kind of one non-null field: int, decimal, nonfinite, boolean,
    date, timestamp, timestamptz, infinite, time, uuid or text."""
    if _INT.fullmatch(text):
        return "int"
    if _DECIMAL.fullmatch(text) and any(c.isdigit() for c in text):
        return "decimal"
    if text in INFINITIES:  # a date's or a number's: its neighbours decide
        return "infinite"
    lower = text.lower()
    if lower in _BOOLEANS:
        return "boolean"
    if lower in _NONFINITE:
        return "nonfinite"
    if _DATE.fullmatch(text):
        return "date" if _parses(date.fromisoformat, text) else "text"
    if match := _STAMP.fullmatch(text):
        kind = "timestamptz" if match["zone"] else "timestamp"
        return kind if _parses(datetime.fromisoformat, text) else "text"
    if _TIME.fullmatch(text):
        return "time" if _parses(time.fromisoformat, text) else "text"
    if _UUID.fullmatch(text):
        return "uuid"
    return "text"


def _parses(parse: Callable[[str], Any], text: str) -> bool:
    try:
        parse(text)
    except ValueError:
        return False
    return True


class ColumnGuess:
    """A column's type as its values so far make it: widened by each value,
    in constant memory."""

    __slots__ = ("high", "kind", "low")

    def __init__(self) -> None:
        self.kind = ""  # no value yet
        self.low = self.high = 0

    def add_all(self, texts: set[str]) -> None:
        for text in texts:
            if self.kind == "text":
                return
            self.add(text)

    def add(self, text: str) -> None:
        if self.kind == "text":
            return
        kind = kind_of(text)
        if kind == "int":
            number = int(text)
            self.low, self.high = min(self.low, number), max(self.high, number)
        if not self.kind or kind == self.kind:
            self.kind = kind
        else:
            self.kind = _JOIN.get(frozenset({self.kind, kind}), "text")

    def fits(self, limit: int) -> bool:
        return self.low >= -limit and self.high < limit

    def type(self, sampled: bool) -> str:
        if self.kind == "int":
            widths = _WIDTHS[2:] if sampled else _WIDTHS
            return next((name for name, limit in widths if self.fits(limit)), "numeric")
        return _FINAL.get(self.kind, "text")


async def infer(
    records: Records, options: CsvOptions, source: _Source, declared: dict[str, str]
) -> list[Column]:
    """The file's columns: declared types as given, the others inferred
    from every row (or the first options.infer_rows)."""
    names: list[str] | None = None
    guesses: list[ColumnGuess] = []
    nulls = options.nulls_for("")  # a marker is no evidence of a type
    left = options.infer_rows
    async with aclosing(records):
        async for chunk in records:
            rows = [fields for _, fields in chunk if fields]
            if names is None and rows:
                names = header_names(rows[0], options, source)
                guesses = [ColumnGuess() for _ in names]
                rows = rows[1:] if options.header else rows
            if left is not None:
                rows, left = rows[:left], left - len(rows[:left])
            for index, guess in enumerate(guesses):
                # Each distinct field once: most columns repeat their values.
                guess.add_all({r[index] for r in rows if index < len(r)} - nulls)
            if left == 0:
                break
    names = names or []
    for name in declared:
        if name not in names:
            where = f"config.columns.{source.stream}.{name}"
            raise PermanentError(f"{where}: {source.where} has no such column")
    sampled = options.infer_rows is not None
    return [
        Column(name, declared.get(name) or guess.type(sampled))
        for name, guess in zip(names, guesses, strict=True)
    ]


# ---------------------------------------------------------------- rows


def _plan(
    names: list[str], source: _Source, columns: Sequence[Column], rewrite: bool
) -> list[int | None]:
    """For each wanted column, the index of its field in a record."""
    wanted = {c.name for c in columns}
    if rewrite and (extra := [n for n in names if n not in wanted]):
        raise _dropped(source, extra)
    index = {name: i for i, name in enumerate(names)}
    plan: list[int | None] = []
    for column in columns:
        if column.name not in index and not rewrite:
            raise PermanentError(
                f"{source.where} has no column {column.name!r} (it has {', '.join(names)})"
            )
        plan.append(index.get(column.name))
    return plan


class _RowReader:
    """Turns records into typed rows of the wanted columns, a chunk and a
    column at a time: each distinct field of a chunk is converted once."""

    def __init__(
        self,
        names: list[str],
        plan: list[int | None],
        options: CsvOptions,
        source: _Source,
        columns: Sequence[Column],
    ) -> None:
        self.width = len(names)
        self.plan = plan
        self.source = source
        self.options = options
        self.columns = list(columns)
        self.nulls = [options.nulls_for(c.type) for c in columns]
        self.done = 0

    def rows(self, records: list[tuple[int, list[str]]]) -> list[Row]:
        if not records:
            return []
        fields = [f for _, f in records]
        for line, record in records:
            if len(record) > self.width:
                raise PermanentError(
                    f"{self.source.where}: line {line} has {len(record)} fields, "
                    f"more than the {self.width} columns"
                )
        if any(len(f) < self.width for f in fields):  # missing trailing fields are empty
            fields = [f + [""] * (self.width - len(f)) for f in fields]
        by_column = list(zip(*fields, strict=True))
        values = [
            [None] * len(records)
            if index is None
            else self._column(by_column[index], column, nulls, records)
            for index, column, nulls in zip(self.plan, self.columns, self.nulls, strict=True)
        ]
        self.done += len(records)
        return list(zip(*values, strict=True))

    def _column(
        self,
        texts: Sequence[str],
        column: Column,
        nulls: frozenset[str],
        records: list[tuple[int, list[str]]],
    ) -> list[Any]:
        if column.type == "text":
            return [None if t in nulls else t for t in texts]
        if column.type == "json":  # mutable: each row gets its own value
            return [None if t in nulls else self._value(t, column, records, texts) for t in texts]
        # Each distinct field of the chunk is converted once.
        memo: dict[str, Any] = dict.fromkeys(nulls)
        for text in set(texts) - memo.keys():
            memo[text] = self._value(text, column, records, texts)
        return list(map(memo.__getitem__, texts))

    def _value(
        self,
        text: str,
        column: Column,
        records: list[tuple[int, list[str]]],
        texts: Sequence[str],
    ) -> Any:
        try:
            return from_text(text, column.type)
        except (ValueError, ArithmeticError) as exc:
            position = self._first_bad(texts, column)
            raise ValueFault(
                f"{self.source.where}: line {records[position][0]}: not a valid {column.type} "
                f"({exc}); {self._why(column)}",
                column=column.name,
                value=texts[position],
                row=self.done + position + 1,
                stream=self.source.stream,
            ) from exc

    def _first_bad(self, texts: Sequence[str], column: Column) -> int:
        nulls = self.nulls[self.columns.index(column)]
        for position, text in enumerate(texts):
            if text in nulls:
                continue
            try:
                from_text(text, column.type)
            except (ValueError, ArithmeticError):
                return position
        return 0

    def _why(self, column: Column) -> str:
        declare = f'declare config.columns.{self.source.stream}.{column.name} (e.g. "text")'
        if self.options.infer_rows is not None:
            return (
                f"its type was inferred from the first {self.options.infer_rows} rows "
                f"(config.csv.infer_rows): raise it, remove it to infer from the whole file, "
                f"or {declare}"
            )
        return f"the file changed since its types were inferred? discover it again, or {declare}"


async def csv_rows(
    records: Records,
    options: CsvOptions,
    source: _Source,
    columns: Sequence[Column],
    rewrite: bool,
) -> AsyncGenerator[list[Row], None]:
    """The file's rows as the given columns. For a rewrite (the old rows of a
    file being written) a column the new rows lack is an error, as the
    rewrite would drop it, and a headerless file's columns are the written
    ones in order."""
    reader: _RowReader | None = None
    async with aclosing(records):
        async for chunk in records:
            data = [(line, fields) for line, fields in chunk if fields]
            if reader is None and data:
                if rewrite and not options.header:
                    names = [c.name for c in columns]
                else:
                    names = header_names(data[0][1], options, source)
                plan = _plan(names, source, columns, rewrite)
                reader = _RowReader(names, plan, options, source, columns)
                data = data[1:] if options.header else data
            yield reader.rows(data) if reader is not None else []


async def first_record(records: Records) -> list[str] | None:
    """The file's first non-empty record (its header, when it has one)."""
    async with aclosing(records):
        async for chunk in records:
            for _, fields in chunk:
                if fields:
                    return fields
    return None
