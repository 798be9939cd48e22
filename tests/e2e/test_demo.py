"""The demo `setu dev` seeds (setu_server/demo.py): made once, by name,
through the API; its shop holds what real data holds; its run succeeds and
lands every row in the warehouse database beside Setu's own."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from setu_client import JobState, SetuClient, struct_to_dict
from setu_client.errors import FailedPrecondition
from setu_server import demo
from setu_server.store.databases import database_of, with_database
from tests.factories import make_tenant
from tests.servers import in_process

TABLES = ("customers", "orders")


@pytest.fixture
async def warehouse_cleanup(database_url: str) -> AsyncIterator[str]:
    """The demo warehouse's name for this test's database, dropped afterwards."""
    name = f"{database_of(database_url)}_demo_warehouse"
    yield name
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        await conn.close()


async def test_the_demo_is_made_once_and_its_run_lands_every_row(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path, warehouse_cleanup: str
) -> None:
    tenant = await make_tenant(pool)
    files = tmp_path / "files"
    secrets = tmp_path / "secrets.json"
    async with (
        # setu dev's cloud reaches the machine's databases: the warehouse is
        # on a socket outside the workspace's folder.
        in_process(database_url, cloud_reach="local", local_files_root=str(files)) as server,
        SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as client,
    ):

        async def seed() -> demo.Demo:
            return await demo.seed(
                client,
                workspace_files=files / str(tenant.workspace_id),
                database_url=database_url,
                secrets_file=secrets,
                workspace_id=str(tenant.workspace_id),
            )

        first = await seed()
        again = await seed()
        pipelines = [p.name async for p in client.list_pipelines()]
        connections = {c.name: c async for c in client.list_connections()}
        job = await client.submit_run(first.pipeline)
        outcome = await client.wait_for_job(job.id)

    assert first.created == (
        "file demo-shop.db",
        f"database {warehouse_cleanup}",
        "connection demo-shop",
        "connection demo-warehouse",
        "pipeline demo",
    )
    assert again.created == () and pipelines == ["demo"]
    assert struct_to_dict(connections["demo-shop"].config) == {"path": str(first.shop)}
    assert not secrets.exists()  # no password in the URL, no secret
    assert outcome.state is JobState.SUCCEEDED, outcome.error_message

    warehouse = await asyncpg.connect(with_database(database_url, warehouse_cleanup))
    try:
        customers = await warehouse.fetch("SELECT * FROM customers ORDER BY id")
        orders = await warehouse.fetchval("SELECT count(*) FROM orders")
        columns = await warehouse.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'orders'"
        )
    finally:
        await warehouse.close()
    assert (len(customers), orders) == (demo.CUSTOMERS, demo.ORDERS)
    phones = [c["phone"] for c in customers if c["phone"]]
    assert phones and all(p[:-4] == "*" * (len(p) - 4) for p in phones)  # masked
    assert "internal_note" not in {c["column_name"] for c in columns}  # dropped


def test_the_shop_holds_nulls_unicode_dates_and_decimals(tmp_path: Path) -> None:
    shop = tmp_path / "shop.db"
    demo.write_shop(shop)
    again = tmp_path / "again.db"
    demo.write_shop(again)

    with sqlite3.connect(shop) as db:
        counts = [db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES]
        null_emails = db.execute("SELECT count(*) FROM customers WHERE email IS NULL").fetchone()[0]
        null_coupons = db.execute("SELECT count(*) FROM orders WHERE coupon IS NULL").fetchone()[0]
        names = [r[0] for r in db.execute("SELECT name FROM customers")]
        notes = [r[0] for r in db.execute("SELECT note FROM customers WHERE note IS NOT NULL")]
        dates = [r[0] for r in db.execute("SELECT signed_up FROM customers LIMIT 5")]
        amounts = [r[0] for r in db.execute("SELECT amount FROM orders LIMIT 50")]
        types = {r[1]: r[2] for r in db.execute("PRAGMA table_info(orders)")}
    with sqlite3.connect(again) as db:
        same = [r[0] for r in db.execute("SELECT name FROM customers")]

    assert counts == [demo.CUSTOMERS, demo.ORDERS]
    assert 0 < null_emails < demo.CUSTOMERS and 0 < null_coupons < demo.ORDERS
    assert any(not n.isascii() for n in names) and any("李" in n for n in names)
    assert any(ord(ch) > 0xFFFF for note in notes for ch in note)  # an emoji
    assert all(len(d) == 10 and d[4] == "-" for d in dates)
    assert types["amount"] == "DECIMAL(10, 2)" and types["ordered_at"] == "DATETIME"
    assert any(Decimal(str(a)) != int(a) for a in amounts)
    assert names == same  # the same rows every time
    assert not (tmp_path / "shop.db.partial").exists()


async def test_a_password_in_the_database_url_becomes_a_secret_of_the_dev_workspace(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path, warehouse_cleanup: str
) -> None:
    tenant = await make_tenant(pool)
    parts = urlsplit(database_url)
    user = parts.username or "postgres"
    with_password = urlunsplit(
        parts._replace(netloc=f"{user}:s3cret@{parts.netloc.rsplit('@', 1)[-1]}")
    )
    secrets = tmp_path / "secrets.json"
    async with (
        in_process(database_url, local_files_root=str(tmp_path)) as server,
        SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as client,
    ):
        await demo.seed(
            client,
            workspace_files=tmp_path / str(tenant.workspace_id),
            database_url=with_password,
            secrets_file=secrets,
            workspace_id=str(tenant.workspace_id),
        )
        configs = {c.name: struct_to_dict(c.config) async for c in client.list_connections()}
        config = configs["demo-warehouse"]

    assert config["password"] == {"$secret": demo.PASSWORD_SECRET}
    assert "s3cret" not in json.dumps(config)
    section = json.loads(secrets.read_text())["workspaces"][str(tenant.workspace_id)]
    assert section == {demo.PASSWORD_SECRET: "s3cret"}


async def test_a_server_that_refuses_to_create_the_warehouse_is_said_in_one_line(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    # A SETU_DATABASE_URL whose user may not create databases: the demo
    # fails as a domain error (setu dev then says so and serves on).
    tenant = await make_tenant(pool)
    role = f"setu_no_createdb_{tenant.workspace_id.hex[:8]}"
    await pool.execute(f"CREATE ROLE {role} LOGIN NOCREATEDB")
    parts = urlsplit(database_url)
    as_role = urlunsplit(parts._replace(netloc=f"{role}@{parts.netloc.rsplit('@', 1)[-1]}"))
    try:
        async with (
            in_process(database_url, local_files_root=str(tmp_path)) as server,
            SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as client,
        ):
            with pytest.raises(FailedPrecondition) as refused:
                await demo.seed(
                    client,
                    workspace_files=tmp_path / str(tenant.workspace_id),
                    database_url=as_role,
                    secrets_file=tmp_path / "secrets.json",
                    workspace_id=str(tenant.workspace_id),
                )
    finally:
        await pool.execute(f"DROP ROLE {role}")

    name = f"{database_of(database_url)}_demo_warehouse"
    assert str(refused.value).startswith(f"cannot create database {name}: permission denied")
