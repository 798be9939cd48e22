"""A secret the operator shares with every workspace (SETU_SHARED_SECRETS)
may be given as a top-level secrets-file entry or as a `SETU_SECRET_<NAME>`
variable of setu-server; either way it reaches the server's cloud workers,
and no other SETU_SECRET_* variable does (setu_server/worker/supervisor.py;
issue 23, audit item 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from setu_client import SetuClient
from tests.factories import Tenant
from tests.s3server import S3Endpoint
from tests.servers import in_process


def _environ(pid: int) -> dict[str, str]:
    items = Path(f"/proc/{pid}/environ").read_text().split("\0")
    return dict(item.split("=", 1) for item in items if "=" in item)


async def test_a_shared_secret_given_as_a_variable_reaches_the_cloud_workers(
    database_url: str,
    s3_endpoint: S3Endpoint,
    tenant: Tenant,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bucket = {
        "url": f"s3://{await s3_endpoint.make_bucket()}/",
        "format": "csv",
        "endpoint_url": s3_endpoint.endpoint_url,
        "access_key_id": s3_endpoint.access_key_id,
    }
    monkeypatch.setenv("SETU_SECRET_LAKE_KEY", s3_endpoint.secret_access_key)
    monkeypatch.setenv("SETU_SECRET_KEPT_BACK", "not-for-tenants")
    settings = {"data_dir": tmp_path / "server", "shared_secrets": "LAKE_KEY, ELSEWHERE"}
    async with (
        in_process(database_url, **settings) as server,
        SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as client,
    ):
        config = bucket | {"secret_access_key": {"$secret": "LAKE_KEY"}}
        shared = await client.create_connection("lake", "file", config)
        answer = await client.test_connection(shared.id)
        assert answer.ok, answer.message

        config = bucket | {"secret_access_key": {"$secret": "KEPT_BACK"}}
        kept = await client.create_connection("kept", "file", config)
        refused = await client.test_connection(kept.id)
        assert not refused.ok
        assert "secret 'KEPT_BACK' is not in this workspace's cloud secrets" in refused.message

        assert server.services.workers is not None
        worker = await server.services.workers.process()
        secrets = {n: v for n, v in _environ(worker.pid).items() if n.startswith("SETU_SECRET_")}
    assert secrets == {"SETU_SECRET_LAKE_KEY": s3_endpoint.secret_access_key}
