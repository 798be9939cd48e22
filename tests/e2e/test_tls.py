"""TLS and mutual TLS for every client, and a failure that says what is wrong.

Certificates are made for the session (tests/certs.py): a private CA that
signs the server's certificate (127.0.0.1, localhost) and a client's, and an
unrelated CA. Real agents and real `setu` commands meet real servers: a
wrong CA, plaintext spoken to a TLS port, a refused port and a proxy's 502
(Debian's nginx) each name their cause in the agent's log and the CLI's
error; a server that requires client certificates refuses an agent without
one and takes one with it; an agent whose server went away says when it is
back."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from setu_client import SetuClient
from setu_client.tls import TlsConfig
from setu_server.server import Running
from tests.certs import Pki, make_pki
from tests.e2e.test_cli_data import setu
from tests.e2e.test_connection_ops import shop
from tests.factories import Tenant
from tests.servers import (
    ADMIN_TOKEN,
    agent_with_stderr,
    checked_in_agent,
    free_port,
    in_process,
    line_with,
)
from tests.topology import running_nginx

# Causes, as setu_client/diagnose.py words them.
WRONG_CA = "TLS handshake failed: the server's certificate is not signed by a CA this client"
PLAINTEXT_TO_TLS = "plaintext spoken to a TLS port"
REFUSED = "connection refused"
NO_CLIENT_CERT = "it may require a client certificate"
PROXY_502 = "a proxy or load balancer in between answered HTTP 502"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _tls(pki: Pki, *, client_ca: bool = False, **more: object) -> dict[str, object]:
    settings: dict[str, object] = {
        "tls_cert": str(pki.server.cert),
        "tls_key": str(pki.server.key),
        "worker_processes": 0,
    }
    if client_ca:
        settings["tls_client_ca"] = str(pki.ca)
    return settings | more


@pytest.fixture
async def tls_server(database_url: str, pki: Pki) -> AsyncIterator[Running]:
    async with in_process(database_url, **_tls(pki)) as running:
        yield running


@pytest.fixture
async def mtls_server(database_url: str, pki: Pki) -> AsyncIterator[Running]:
    async with in_process(database_url, **_tls(pki, client_ca=True)) as running:
        yield running


async def _warning_of(agent: asyncio.subprocess.Process, text: str) -> dict[str, object]:
    """The agent's first WARNING line about not reaching its server, which
    must hold `text`."""
    try:
        line = await asyncio.wait_for(line_with(agent, "cannot reach"), 60)
    finally:
        agent.kill()
        await agent.wait()
    record: dict[str, object] = json.loads(line)
    assert record["level"] == "warning", record
    assert text in str(record["msg"]), record
    return record


def _cli_env(**env: str) -> dict[str, str]:
    return dict(os.environ) | {"SETU_ADMIN_TOKEN": ADMIN_TOKEN} | env


async def test_the_agent_and_the_cli_name_a_wrong_ca_plaintext_to_tls_and_a_refused_port(
    tls_server: Running, tenant: Tenant, pki: Pki
) -> None:
    port, refused = tls_server.port, free_port()
    cases = {
        # --root-cert of a CA that did not sign the server's certificate
        "wrong ca": (port, {"SETU_ROOT_CERT": str(pki.other_ca)}, WRONG_CA),
        "plaintext": (port, {}, PLAINTEXT_TO_TLS),
        "refused": (refused, {}, REFUSED),
    }
    agents = {
        name: await agent_with_stderr(to, tenant.agent_token, **env)
        for name, (to, env, _) in cases.items()
    }
    admin = [
        setu("admin", "--server", f"127.0.0.1:{to}", "workspace", "list", env=_cli_env(**env))
        for to, env, _ in cases.values()
    ]
    # A client command too, through the SDK (it gives up after the CLI's 5 s).
    job = str(uuid.uuid4())
    jobs_get = setu(
        "jobs",
        "get",
        job,
        "--server",
        f"127.0.0.1:{port}",
        "--api-key",
        tenant.api_key,
        "--root-cert",
        str(pki.other_ca),
        env=_cli_env(),
    )
    answers = await asyncio.gather(*admin, jobs_get)
    records = await asyncio.gather(
        *(_warning_of(agents[name], cause) for name, (_, _, cause) in cases.items())
    )

    for record, (to, _, _) in zip(records, cases.values(), strict=True):
        assert str(record["msg"]).startswith(f"cannot reach 127.0.0.1:{to}: "), record
        assert record["server"] == f"127.0.0.1:{to}"
    for (code, _, err), (to, _, cause) in zip(
        answers, [*cases.values(), (port, {}, WRONG_CA)], strict=True
    ):
        assert code == 2
        assert err.startswith(f"error: cannot reach 127.0.0.1:{to}: "), err
        assert cause in err and len(err.strip().splitlines()) == 1, err


async def test_an_outage_is_one_warning_then_quiet_retries(tenant: Tenant) -> None:
    port = free_port()  # nothing listens there
    agent = await agent_with_stderr(port, tenant.agent_token, SETU_LOG_LEVEL="debug")
    seen: list[str] = []
    try:
        for _ in range(3):
            await asyncio.wait_for(line_with(agent, "still cannot reach", seen), 60)
    finally:
        agent.kill()
        await agent.wait()
    about_it = [json.loads(line) for line in seen if "cannot reach" in line]
    assert [r["level"] for r in about_it] == ["warning", "debug", "debug", "debug"]
    assert all(REFUSED in r["msg"] for r in about_it)


async def test_mutual_tls_refuses_an_agent_without_a_client_certificate_and_takes_one_with_it(
    mtls_server: Running, tenant: Tenant, pki: Pki, tmp_path: Path
) -> None:
    port = mtls_server.port
    roots = {"SETU_ROOT_CERT": str(pki.ca)}
    without = await agent_with_stderr(port, tenant.agent_token, **roots)
    stranger = await agent_with_stderr(
        port,
        tenant.agent_token,
        **roots,
        SETU_CLIENT_CERT=str(pki.other_client.cert),
        SETU_CLIENT_KEY=str(pki.other_client.key),
    )
    await _warning_of(without, NO_CLIENT_CERT)
    await _warning_of(stranger, NO_CLIENT_CERT)

    with_cert = roots | {
        "SETU_CLIENT_CERT": str(pki.client.cert),
        "SETU_CLIENT_KEY": str(pki.client.key),
    }
    async with checked_in_agent(port, tenant.agent_token, tmp_path / "agent.log", **with_cert):
        pass  # checked in: the server took its certificate


async def test_setu_admin_and_the_sdk_use_a_private_ca_and_a_client_certificate(
    mtls_server: Running, tenant: Tenant, pki: Pki
) -> None:
    address = f"127.0.0.1:{mtls_server.port}"
    # Flags: --tls --root-cert, and the client certificate's pair.
    code, out, err = await setu(
        "admin",
        "--server",
        address,
        "--tls",
        "--root-cert",
        str(pki.ca),
        "--client-cert",
        str(pki.client.cert),
        "--client-key",
        str(pki.client.key),
        "workspace",
        "list",
        env=_cli_env(),
    )
    assert code == 0, err
    assert str(tenant.workspace_id) in [w["id"] for w in json.loads(out)["workspaces"]]
    # The same settings from the environment, for a client command.
    env = _cli_env(
        SETU_SERVER=address,
        SETU_API_KEY=tenant.api_key,
        SETU_ROOT_CERT=str(pki.ca),
        SETU_CLIENT_CERT=str(pki.client.cert),
        SETU_CLIENT_KEY=str(pki.client.key),
    )
    code, out, err = await setu("--json", "jobs", "list", env=env)
    assert code == 0, err
    # Without the client certificate, the same command is refused and says why.
    del env["SETU_CLIENT_CERT"], env["SETU_CLIENT_KEY"]
    code, _, err = await setu("admin", "workspace", "list", env=env)
    assert code == 2 and NO_CLIENT_CERT in err, err

    tls = TlsConfig.from_files(pki.ca, pki.client.cert, pki.client.key)
    async with SetuClient(address, tenant.api_key, tls=tls) as client:
        assert [j async for j in client.list_jobs()] == []


async def test_the_servers_own_cloud_workers_connect_under_mutual_tls(
    database_url: str, tenant: Tenant, pki: Pki, tmp_path: Path
) -> None:
    settings = _tls(
        pki,
        client_ca=True,
        worker_processes=1,
        worker_client_cert=str(pki.client.cert),
        worker_client_key=str(pki.client.key),
        data_dir=tmp_path / "server",
    )
    tls = TlsConfig.from_files(pki.ca, pki.client.cert, pki.client.key)
    async with in_process(database_url, **settings) as server:
        async with SetuClient(f"127.0.0.1:{server.port}", tenant.api_key, tls=tls) as client:
            conn = await client.create_connection(
                "shop", "sqlite", {"path": str(shop(tmp_path / "s.db"))}
            )
            tested = await client.test_connection(conn.id)
    assert tested.ok and tested.runtime == "cloud", tested


async def test_a_server_refuses_to_start_workers_that_mutual_tls_would_refuse(
    database_url: str, pki: Pki
) -> None:
    with pytest.raises(SystemExit, match="SETU_WORKER_CLIENT_CERT"):
        async with in_process(database_url, **_tls(pki, client_ca=True, worker_processes=1)):
            pass


async def test_the_agent_says_when_it_reconnects(
    database_url: str, tenant: Tenant, tmp_path: Path
) -> None:
    port = free_port()
    # A short lease cap: the first lease after the restart answers in a second.
    settings = {"listen": f"127.0.0.1:{port}", "lease_wait_cap_seconds": 1, "worker_processes": 0}
    lost, back = asyncio.Event(), asyncio.Event()
    lines: list[str] = []

    def on_line(line: bytes) -> None:
        text = line.decode()
        if "cannot reach" in text:
            lost.set()
        if "reconnected to" in text and not back.is_set():
            lines.append(text)
            back.set()

    first = in_process(database_url, **settings)
    await first.__aenter__()
    stopped = False
    try:
        async with checked_in_agent(port, tenant.agent_token, tmp_path / "a.log", on_line):
            stopped = True
            await first.__aexit__(None, None, None)
            await asyncio.wait_for(lost.wait(), 60)
            async with in_process(database_url, **settings):
                await asyncio.wait_for(back.wait(), 60)
    finally:
        if not stopped:
            await first.__aexit__(None, None, None)
    (reconnected,) = lines
    record = json.loads(reconnected)
    assert record["level"] == "info"
    assert str(record["msg"]).startswith(f"reconnected to 127.0.0.1:{port} after ")
    assert float(record["seconds"]) > 0


async def test_the_agent_and_the_cli_name_a_proxy_that_answers_5xx(tenant: Tenant) -> None:
    # nginx in front of a server that is not there answers every call 502.
    with running_nginx({"dead": None}) as proxy:
        port = proxy.ports["dead"]
        agent = await agent_with_stderr(port, tenant.agent_token)
        code, _, err = await setu(
            "admin", "--server", f"127.0.0.1:{port}", "workspace", "list", env=_cli_env()
        )
        record = await _warning_of(agent, PROXY_502)
    assert str(record["msg"]).startswith(f"cannot reach 127.0.0.1:{port}: "), record
    # The CLI names where the address came from; the proxy's answer is no
    # "nothing listens", so no hint about starting a server follows.
    assert code == 2 and err.strip() == (
        f"error: cannot reach 127.0.0.1:{port}: {PROXY_502} (the address given by --server)"
    )
