"""Fuzz the whole API, longer than `make test` does.

The same fuzzer as tests/e2e/test_fuzz_api.py (hypothesis strategies built
from the proto descriptors), with more examples per RPC, against a real
in-process server on an embedded PostgreSQL (or SETU_DATABASE_URL, whose
database it creates and drops). Prints, per RPC, the calls made, the time
taken and the statuses seen; then any call answered INTERNAL or UNKNOWN and
any error the server logged. Exits 1 if there was either.

    python scripts/fuzz_api.py [--examples 300] [--raw 100] [--seed 0] [--only NAME]

--seed 0 keeps hypothesis derandomized (the same examples as every run);
any other seed draws new ones.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import tempfile
import uuid
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from setu_server.store import db  # noqa: E402
from setu_server.store.migrate import migrate  # noqa: E402
from tests.e2e import test_fuzz_api as fuzzer  # noqa: E402
from tests.e2e.test_rpc_validation import Api, ServerLog  # noqa: E402
from tests.factories import make_tenant  # noqa: E402
from tests.servers import in_process  # noqa: E402


@contextlib.asynccontextmanager
async def scratch_database(folder: Path) -> AsyncIterator[str]:
    """A fresh, migrated database: on SETU_DATABASE_URL's server, or an
    embedded one in `folder`."""
    server_url = os.environ.get("SETU_DATABASE_URL", "")
    embedded = None
    if not server_url:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pgserver

        embedded = pgserver.get_server(folder / "pg", cleanup_mode="delete")
        server_url = embedded.get_uri("postgres")
    name = f"setu_fuzz_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f"CREATE DATABASE {name}")
    finally:
        await admin.close()
    url = urlunsplit(urlsplit(server_url)._replace(path="/" + name))
    try:
        conn = await db.connect(url)
        try:
            await migrate(conn)
        finally:
            await conn.close()
        yield url
    finally:
        admin = await asyncpg.connect(server_url)
        try:
            await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        finally:
            await admin.close()
        if embedded is not None:
            embedded.cleanup()


async def main(args: argparse.Namespace) -> int:
    log = ServerLog()
    for name in ("setu", "grpc"):
        logging.getLogger(name).addHandler(log)
        logging.getLogger(name).setLevel(logging.DEBUG)
    with tempfile.TemporaryDirectory(prefix="setu-fuzz-") as scratch:
        folder = Path(scratch)
        async with scratch_database(folder) as url:
            pool = await db.create_pool(url, max_size=4)
            try:
                tenant = await make_tenant(pool)
                async with in_process(
                    url, data_dir=folder, local_files_root=str(folder), **fuzzer.FUZZ_SERVER
                ) as server:
                    api = Api(server, tenant)
                    try:
                        known = await fuzzer.known_objects(api, pool)
                        methods = [
                            m
                            for m in fuzzer.all_methods()
                            if not args.only or args.only in m.full_name
                        ]
                        tally = await fuzzer.fuzz(
                            api,
                            known,
                            examples=args.examples,
                            raw_examples=args.raw,
                            methods=methods,
                            seed=args.seed or None,
                        )
                    finally:
                        await api.close()
            finally:
                await pool.close()
    print(fuzzer.report(tally))
    errors = log.errors()
    for line in tally.failures:
        print("FAILURE", line)
    for line in errors:
        print("LOGGED", line)
    print(f"{len(tally.failures)} calls answered INTERNAL or UNKNOWN; {len(errors)} errors logged")
    return 1 if tally.failures or errors else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=300, help="generated messages per RPC")
    parser.add_argument("--raw", type=int, default=100, help="raw byte strings per RPC")
    parser.add_argument("--seed", type=int, default=0, help="0: derandomized; else a seed")
    parser.add_argument("--only", default="", help="only RPCs whose full name contains this")
    sys.exit(asyncio.run(main(parser.parse_args())))
