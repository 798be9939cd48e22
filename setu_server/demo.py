"""The demo `setu dev` seeds, so a newcomer's first run is one command.

On every start `setu dev` makes sure its dev workspace holds, by name:
- `demo-shop`, a SQLite file Setu generates in the workspace's folder (a
  shop's customers and orders: thousands of rows with nulls, non-Latin names
  and emoji, dates, timestamps and decimals), placed in the cloud;
- `demo-warehouse`, a database of its own on the dev server's PostgreSQL
  (`<setu's database>_demo_warehouse`), placed in the cloud;
- `demo`, a pipeline from the one to the other (upsert, with a small
  operator chain), which `setu run demo --wait` runs.

What exists is left as it is (a second start creates nothing); what a
person deleted comes back at the next start, unless `setu dev --no-demo`.
Everything goes through the SDK, as a user's calls would: the same
validation, nothing written into Setu's tables behind its back. The shop is
discovered once made, so pipelines reading it are checked against its
catalog when they are created.
"""

from __future__ import annotations

import random
import sqlite3
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from setu_client import SetuClient
from setu_engine.support.secrets_file import set_secret
from setu_server.store.databases import database_of, ensure_database, with_database

PIPELINE = "demo"
SOURCE = "demo-shop"
DESTINATION = "demo-warehouse"
SHOP_FILE = "demo-shop.db"
PASSWORD_SECRET = "DEMO_WAREHOUSE_PASSWORD"
CUSTOMERS = 2_000
ORDERS = 6_000

# Shown to whoever runs the demo: masking and dropping, each on one stream.
OPERATORS: list[dict[str, Any]] = [
    {"op": "mask", "columns": ["phone"], "keep": 4, "streams": ["customers"]},
    {"op": "drop", "columns": ["internal_note"], "streams": ["orders"]},
]


@dataclass(frozen=True)
class Demo:
    """What the banner says of the demo."""

    pipeline: str
    shop: Path
    database: str
    created: tuple[str, ...]  # what this start made ("" when all existed)


async def seed(
    client: SetuClient,
    *,
    workspace_files: Path,
    database_url: str,
    secrets_file: Path,
    workspace_id: str,
) -> Demo:
    """The demo's file, database, connections and pipeline, each made when
    missing. `database_url` is Setu's own database: the warehouse is another
    database on the same server."""
    created: list[str] = []
    shop = workspace_files / SHOP_FILE
    if not shop.exists():
        write_shop(shop)
        created.append(f"file {shop.name}")
    database = f"{database_of(database_url)}_demo_warehouse"[:63]
    if await ensure_database(database_url, database):
        created.append(f"database {database}")
    config = warehouse_config(with_database(database_url, database))
    password = urlsplit(database_url).password
    if password:  # never stored in a config: a secret of the dev workspace
        set_secret(secrets_file, workspace_id, PASSWORD_SECRET, password)
        config["password"] = {"$secret": PASSWORD_SECRET}

    connections = {c.name: c async for c in client.list_connections()}
    if SOURCE not in connections:
        connections[SOURCE] = await client.create_connection(SOURCE, "sqlite", {"path": str(shop)})
        created.append(f"connection {SOURCE}")
        # Its catalog known, a pipeline reading it is checked when created
        # (streams, columns, keys: docs/pipelines.md), the demo's first.
        await client.discover_streams(connections[SOURCE].id, timeout_seconds=60)
    if DESTINATION not in connections:
        connections[DESTINATION] = await client.create_connection(DESTINATION, "postgres", config)
        created.append(f"connection {DESTINATION}")
    if not any([p async for p in client.list_pipelines() if p.name == PIPELINE]):
        await client.create_pipeline(
            PIPELINE,
            connections[SOURCE].id,
            connections[DESTINATION].id,
            streams=["customers", "orders"],
            spec={"operators": OPERATORS},
            write_mode="upsert",
        )
        created.append(f"pipeline {PIPELINE}")
    return Demo(PIPELINE, shop, database, tuple(created))


def warehouse_config(url: str) -> dict[str, Any]:
    """The `postgres` provider's config for a URL (its password aside): a
    host, or the socket folder of `?host=/path` as the embedded server has."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    config: dict[str, Any] = {
        "host": query.get("host", [parts.hostname or "localhost"])[0],
        "database": parts.path.lstrip("/"),
        "user": parts.username or "postgres",
    }
    if parts.port:
        config["port"] = parts.port
    sslmode = query.get("sslmode", [""])[0]
    if sslmode in ("disable", "prefer", "require", "verify-ca", "verify-full"):
        config["ssl"] = sslmode
    return config


# ---------------------------------------------------------------- the shop

_FIRST = [
    "José", "Zoë", "Ingrid", "Mateo", "Aiko", "Ελένη", "Олег", "Amélie", "Nnamdi",
    "Siobhán", "Łukasz", "Priya", "Søren", "Yusuf", "María", "Björn", "Chloé", "Ravi",
]  # fmt: skip
_LAST = [
    "Álvarez", "Ødegaard", "Nakamura", "Παπαδοπούλου", "Иванов", "Dubois", "Okafor",
    "Ní Bhriain", "Wiśniewski", "Sharma", "Kierkegaard", "Yılmaz", "Müller", "O'Brien",  # noqa: RUF001
]  # fmt: skip
_FULL = ["李雷", "韩梅梅", "김민준", "محمد علي", "שרה כהן", "Nguyễn Văn An"]
_COUNTRIES = ["Deutschland", "España", "日本", "India", "Brasil", "Ελλάδα", "Türkiye", "USA"]
_CITIES = ["München", "Sevilla", "東京", "Bengaluru", "São Paulo", "Αθήνα", "İzmir", "Austin"]
_NOTES = [
    "🎉 loyal since the first order",
    "prefers pickup 🚚",
    "birthday in March 🎂",
    "asked for invoices in Ελληνικά",
    "allergic to glitter ✨",
    "pays late 🐢",
]
_STATUSES = ["paid"] * 6 + ["shipped"] * 8 + ["refunded", "void"]
_COUPONS = ["WELCOME10", "SOMMER-25", "🎁GIFT", "ŠKOLA5"]
_CURRENCIES = ["EUR", "EUR", "USD", "JPY", "INR", "BRL"]

_SCHEMA = """
CREATE TABLE customers (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    email TEXT,
    phone TEXT,
    country TEXT NOT NULL,
    city TEXT,
    signed_up DATE NOT NULL,
    vip BOOLEAN NOT NULL,
    note TEXT
);
CREATE TABLE orders (
    id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers (id),
    ordered_at DATETIME NOT NULL,
    status TEXT NOT NULL,
    amount DECIMAL(10, 2) NOT NULL,
    currency TEXT NOT NULL,
    coupon TEXT,
    internal_note TEXT
);
"""


def write_shop(path: Path, customers: int = CUSTOMERS, orders: int = ORDERS) -> None:
    """The demo's SQLite source, the same rows every time (a fixed seed);
    written aside and renamed, so a half-written file is never the source."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.unlink(missing_ok=True)
    rng = random.Random(15)
    people = [_customer(rng, i) for i in range(1, customers + 1)]
    signed_up = {row[0]: row[6] for row in people}
    with sqlite3.connect(partial) as db:
        db.executescript(_SCHEMA)
        db.executemany("INSERT INTO customers VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", people)
        db.executemany(
            "INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (_order(rng, i, customers, signed_up) for i in range(1, orders + 1)),
        )
    db.close()
    partial.replace(path)


def _customer(rng: random.Random, i: int) -> tuple[Any, ...]:
    pick = rng.random() < 0.1
    name = rng.choice(_FULL) if pick else f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
    email = None if rng.random() < 0.06 else f"customer{i}@example.com"
    phone = None if rng.random() < 0.15 else f"+1 555 {rng.randrange(1000, 10000)} {i:04d}"
    where = rng.randrange(len(_COUNTRIES))
    city = None if rng.random() < 0.05 else _CITIES[where]
    joined = date(2019, 1, 1) + timedelta(days=rng.randrange(6 * 365))
    note = rng.choice(_NOTES) if rng.random() < 0.12 else None
    vip = int(rng.random() < 0.08)
    return (i, name, email, phone, _COUNTRIES[where], city, joined.isoformat(), vip, note)


def _order(
    rng: random.Random, i: int, customers: int, signed_up: dict[int, str]
) -> tuple[Any, ...]:
    customer = rng.randrange(1, customers + 1)
    start = datetime.fromisoformat(signed_up[customer])
    at = start + timedelta(seconds=rng.randrange(2 * 365 * 86_400))
    cents = rng.randrange(99, 250_000)
    coupon = rng.choice(_COUPONS) if rng.random() < 0.2 else None
    internal = "checked by hand" if rng.random() < 0.03 else None
    return (
        i,
        customer,
        at.isoformat(sep=" "),
        rng.choice(_STATUSES),
        f"{cents // 100}.{cents % 100:02d}",
        rng.choice(_CURRENCIES),
        coupon,
        internal,
    )
