"""Neutral values that Python's own types cannot hold, and the error a bad
value raises.

- `INFINITY` / `MINUS_INFINITY`: PostgreSQL's 'infinity' and '-infinity' of
  a date, timestamp or timestamptz. `datetime` has no such value (asyncpg
  clamps them to `datetime.max`/`min`, which silently changes the data), so
  the engine carries them as these two markers, which order after (before)
  every date and datetime.
- `JSON_NULL`: a json value that *is* JSON's `null`, as opposed to SQL NULL
  (None). Only a whole value needs it: a null inside an object or array is
  plain None.
- `shortest_real`: a PostgreSQL `real` (float4, carried as the double of
  exactly its value) as the double nearest its shortest decimal spelling
  (0.01, not 0.009999999776482582): what the text writers print (JSON
  Lines, CSV, SQLite's REAL), as PostgreSQL does; encoding it back gives the
  same float4.

Spellings (docs/data-types.md): text formats write the infinities as
`infinity`/`-infinity`, and non-finite numbers as `NaN`, `Infinity` and
`-Infinity`, for double and numeric alike.
"""

from __future__ import annotations

import math
import struct
from datetime import date
from typing import Final

from setu_engine.values import spellings


class Infinite:
    """PostgreSQL's ±infinity of a date or timestamp (one of two singletons)."""

    __slots__ = ("sign",)

    def __init__(self, sign: int) -> None:
        self.sign = sign

    def __repr__(self) -> str:
        return "INFINITY" if self.sign > 0 else "MINUS_INFINITY"

    def __str__(self) -> str:
        return self.text

    @property
    def text(self) -> str:
        return spellings.DATE_INFINITY if self.sign > 0 else spellings.DATE_MINUS_INFINITY

    def __reduce__(self) -> str:
        # Pickled (a file upsert spills rows) as the module's singleton.
        return repr(self)

    def __hash__(self) -> int:
        return hash(("setu-infinite", self.sign))

    def __eq__(self, other: object) -> bool:
        return other is self

    def _order(self, other: object) -> int | None:
        if isinstance(other, Infinite):
            return (self.sign > other.sign) - (self.sign < other.sign)
        if isinstance(other, date):  # datetime is a date
            return self.sign
        return None

    def __lt__(self, other: object) -> bool:
        order = self._order(other)
        return NotImplemented if order is None else order < 0

    def __le__(self, other: object) -> bool:
        order = self._order(other)
        return NotImplemented if order is None else order <= 0

    def __gt__(self, other: object) -> bool:
        order = self._order(other)
        return NotImplemented if order is None else order > 0

    def __ge__(self, other: object) -> bool:
        order = self._order(other)
        return NotImplemented if order is None else order >= 0


INFINITY: Final = Infinite(1)
MINUS_INFINITY: Final = Infinite(-1)
INFINITIES: Final = {"infinity": INFINITY, "-infinity": MINUS_INFINITY, "+infinity": INFINITY}


class JsonNull:
    """A json value that is JSON's `null` (SQL NULL is None)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "JSON_NULL"

    def __reduce__(self) -> str:
        return "JSON_NULL"

    def __bool__(self) -> bool:
        return False


JSON_NULL: Final = JsonNull()

# --- non-finite numbers ------------------------------------------------------

NAN_TEXT = spellings.NAN
INF_TEXT = spellings.INFINITY
NEG_INF_TEXT = spellings.MINUS_INFINITY
NONFINITE_TEXTS: Final = frozenset({NAN_TEXT, INF_TEXT, NEG_INF_TEXT})


def nonfinite_text(value: float) -> str:
    """The one spelling of a non-finite double (and numeric) in text formats
    (setu_engine/values/spellings.py)."""
    if value != value:
        return spellings.NAN
    return spellings.INFINITY if value > 0 else spellings.MINUS_INFINITY


_F4 = struct.Struct("!f")
_F4_MIN_NORMAL = 1.1754943508222875e-38


def shortest_real(value: float) -> float:
    """The double nearest the shortest decimal that reads back as the same
    float4 as `value` (itself a float4 widened to a double)."""
    if not math.isfinite(value) or value == 0.0:
        return value
    pack, unpack = _F4.pack, _F4.unpack
    # A normal float4 holds over 7 digits, so a spelling shorter than 6
    # digits shows up as %.6g with its zeros stripped; a subnormal may need
    # as few as one.
    tries = (6, 7, 8) if abs(value) >= _F4_MIN_NORMAL else range(1, 9)
    for digits in tries:
        candidate = float(f"{value:.{digits}g}")
        if unpack(pack(candidate))[0] == value:
            return candidate
    return float(f"{value:.9g}")


# --- a bad value -------------------------------------------------------------
