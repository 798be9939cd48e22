"""The run monitor over plain HTTP: sign-in, workspace scope, CSRF, secrets,
and what each page and stream shows. (The browser test drives it live.)"""

from __future__ import annotations

import asyncio
import html
import json
import re
import secrets
import sqlite3
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import asyncpg
import pytest
from markupsafe import escape

from setu_client import JobState, SetuClient
from setu_client.errors import SetuError
from setu_server.models import Job, JobKind, JobOutput
from setu_server.models import JobState as ServerJobState
from setu_server.server import Running
from setu_server.web import live, reads
from setu_server.web.render import fragment
from tests.databases import postgres_config, scratch_database
from tests.e2e.monitor_helpers import check_in, make_copy, open_monitor, signed_in
from tests.factories import Tenant, make_job
from tests.servers import in_process

# Generous: only a broken stream ever reaches it.
STREAM_DEADLINE = 60


async def test_signing_in_takes_a_workspace_api_key_only(server: Running, tenant: Tenant) -> None:
    async with open_monitor(server.http_url) as monitor:
        status, _ = await monitor.page("/runs")
        refused = [await monitor.sign_in(key) for key in ("", "setu_nope", tenant.agent_token)]
        assert (await monitor.page("/runs"))[0] == 303
        accepted = await monitor.sign_in(tenant.api_key)
        cookie = accepted.headers["Set-Cookie"]
        after, html = await monitor.page("/runs")

    assert status == 303  # signed out: to the sign-in page
    assert [r.status for r in refused] == [401, 401, 401]
    assert "takes a workspace API key, not an agent token" in await refused[2].text()
    assert accepted.status == 303 and accepted.headers["Location"] == "/runs"
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert tenant.api_key not in cookie
    assert after == 200 and "<h1>Runs</h1>" in html


async def test_a_revoked_key_signs_its_sessions_out(server: Running, tenant: Tenant) -> None:
    async with signed_in(server.http_url, tenant.api_key) as monitor:
        before, _ = await monitor.page("/runs")
        keys = await server.services.admin.list_api_keys(tenant.workspace_id)
        await server.services.admin.revoke_api_key(keys[0].id)
        after, _ = await monitor.page("/runs")

    assert (before, after) == (200, 303)


async def test_another_workspaces_run_is_a_404_page(
    server: Running, tenant: Tenant, other: Tenant, tmp_path: Path
) -> None:
    async with SetuClient(f"127.0.0.1:{server.port}", other.api_key) as theirs:
        copy = await make_copy(theirs, tmp_path)
        job = await theirs.submit_run(copy.pipeline_id, start=False)
    async with signed_in(server.http_url, tenant.api_key) as monitor:
        page, html = await monitor.page(f"/runs/{job.id}")
        stream, _ = await monitor.page(f"/runs/{job.id}/live")
        token = await monitor.csrf()
        cancel, _, _ = await monitor.post(f"/runs/{job.id}/cancel", {"csrf": token})
        run_now, _, _ = await monitor.post(f"/pipelines/{copy.pipeline_id}/run", {"csrf": token})
        test, _, _ = await monitor.post(f"/connections/{copy.source_id}/test", {"csrf": token})
        _, listed = await monitor.page("/runs")
        garbage, _ = await monitor.page("/runs/not-a-job")
    async with signed_in(server.http_url, other.api_key) as owner:
        theirs_page, _ = await owner.page(f"/runs/{job.id}")

    assert page == 404 and f"job {job.id} not found" in html
    assert (stream, cancel, run_now, test, garbage) == (404, 404, 404, 404, 404)
    assert str(job.id) not in listed
    assert theirs_page == 200


async def test_a_post_without_the_csrf_token_is_refused(
    server: Running, client: SetuClient, tenant: Tenant, tmp_path: Path
) -> None:
    copy = await make_copy(client, tmp_path)
    job = await client.submit_run(copy.pipeline_id, start=False)
    async with signed_in(server.http_url, tenant.api_key) as monitor:
        bare, _, _ = await monitor.post(f"/runs/{job.id}/cancel", {})
        forged, _, _ = await monitor.post(f"/runs/{job.id}/cancel", {"csrf": "forged"})
        run_now, _, _ = await monitor.post(f"/pipelines/{copy.pipeline_id}/run", {})
        untouched = await client.get_job(job.id)
        runs_before = [j async for j in client.list_jobs()]
        token = await monitor.csrf()
        cross_site = await monitor.http.post(
            f"{monitor.url}/runs/{job.id}/cancel",
            data={"csrf": token},
            headers={"Origin": "https://evil.example"},
            allow_redirects=False,
        )
        accepted, location, _ = await monitor.post(f"/runs/{job.id}/cancel", {"csrf": token})
        cancelled = await client.get_job(job.id)

    assert (bare, forged, run_now, cross_site.status) == (403, 403, 403, 403)
    assert untouched.state is JobState.READY and len(runs_before) == 1
    assert (accepted, location) == (303, f"/runs/{job.id}")
    assert cancelled.state is JobState.CANCELLED


async def test_a_secret_value_never_appears_in_a_page_or_a_stream(
    database_url: str, pg_server_url: str, tenant: Tenant, tmp_path: Path
) -> None:
    # The source database's name is the secret: the run resolves it in the
    # cloud worker and succeeds, so the value went through the whole system.
    async with scratch_database(pg_server_url, f"monitor_{secrets.token_hex(6)}") as source_url:
        config = postgres_config(source_url)
        secret_value = config["database"]
        conn = await asyncpg.connect(source_url)
        await conn.execute("CREATE TABLE items AS SELECT i AS id FROM generate_series(1, 9) i")
        await conn.close()
        secrets_file = tmp_path / "secrets.json"
        secrets_file.write_text(
            json.dumps({"workspaces": {str(tenant.workspace_id): {"SRC_DB": secret_value}}})
        )
        async with (
            in_process(database_url, secrets_file=str(secrets_file)) as server,
            SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as client,
        ):
            source = await client.create_connection(
                "src", "postgres", config | {"database": {"$secret": "SRC_DB"}}
            )
            into = await client.create_connection(
                "dst", "sqlite", {"path": str(tmp_path / "dst.db"), "create": True}
            )
            pipeline = await client.create_pipeline("copy", source.id, into.id)
            job = await client.submit_run(pipeline.id)
            outcome = await client.wait_for_job(job.id)
            async with signed_in(server.http_url, tenant.api_key) as monitor:
                token = await monitor.csrf()
                _, tested, _ = await monitor.post(f"/connections/{source.id}/test", {"csrf": token})
                seen = [await monitor.page(path) for path in (*PAGES, f"/runs/{job.id}", tested)]
                async with asyncio.timeout(STREAM_DEADLINE):
                    run_stream = [m async for m in monitor.stream(f"/runs/{job.id}/live")]
                live = monitor.stream("/runs/live")
                list_stream = await anext(live)
                await live.aclose()

    assert outcome.state is JobState.SUCCEEDED, outcome.error_message
    assert all(status == 200 for status, _ in seen), seen
    assert "Test passed" in seen[-1][1] and "secret SRC_DB" in seen[-1][1]
    assert "9 of 9" in seen[-2][1]
    text = "".join(html for _, html in seen) + json.dumps([run_stream, list_stream])
    assert run_stream[-1] == ("end", {"state": "succeeded"})
    assert secret_value not in text


PAGES = ("/runs", "/pipelines", "/connections", "/agents")


async def test_the_runs_list_filters_pages_and_follows_new_runs(
    server: Running, client: SetuClient, tenant: Tenant, tmp_path: Path
) -> None:
    first = await make_copy(client, tmp_path / "a", name="first")
    second = await make_copy(client, tmp_path / "b", name="second")
    ready = [(await client.submit_run(first.pipeline_id, start=False)).id for _ in range(26)]
    done = await client.submit_run(second.pipeline_id)
    await client.wait_for_job(done.id)
    async with signed_in(server.http_url, tenant.api_key) as monitor:
        _, everything = await monitor.page("/runs")
        older = re.search(r'rel="next" href="([^"]+)"', everything)
        assert older, everything
        _, page_two = await monitor.page(html.unescape(older.group(1)))
        _, succeeded = await monitor.page("/runs?state=succeeded")
        _, of_first = await monitor.page(f"/runs?pipeline={first.pipeline_id}")
        stream = monitor.stream(f"/runs/live?pipeline={second.pipeline_id}")
        async with asyncio.timeout(STREAM_DEADLINE):  # fail, rather than hang, if it never comes
            _, before = await anext(stream)
            fresh = await client.submit_run(second.pipeline_id, start=False)
            _, after = await anext(stream)
        await stream.aclose()

    rows = lambda text: set(re.findall(r'<tr data-job="([^"]+)"', text))  # noqa: E731
    assert len(rows(everything)) == 25 and done.id in rows(everything)
    assert rows(everything) | rows(page_two) == {*ready, done.id}
    assert not rows(everything) & rows(page_two)
    assert rows(succeeded) == {done.id}
    assert rows(of_first) == set(ready[-25:])
    assert rows(before["html"]) == {done.id}
    assert rows(after["html"]) == {done.id, fresh.id}
    assert '<svg class="chart"' in everything and "<svg" not in page_two


async def test_runs_and_connection_operations_are_separate_lists(
    server: Running, client: SetuClient, tenant: Tenant, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    # Operations made between the runs, so each list pages past the other's rows.
    copy = await make_copy(client, tmp_path)
    runs, bare = [], []
    for i in range(26):
        runs.append((await client.submit_run(copy.pipeline_id, start=False)).id)
        kind = (JobKind.TEST, JobKind.DISCOVER, JobKind.PREVIEW)[i % 3]
        bare.append(str((await make_job(pool, tenant.workspace_id, kind=kind)).id))
        if i == 12:
            await client.test_connection(copy.source_id)
            await client.discover_streams(copy.source_id)
            with pytest.raises(SetuError, match="itmes"):  # a typo
                await client.preview_stream(copy.source_id, "itmes")
    operations = {j.id async for j in client.list_jobs()} - set(runs)
    real = operations - set(bare)
    async with signed_in(server.http_url, tenant.api_key) as monitor:
        _, runs_page = await monitor.page("/runs")
        _, runs_two = await monitor.page(html.unescape(older(runs_page)))
        _, ops_page = await monitor.page("/runs?kind=ops")
        ops_next = html.unescape(older(ops_page))
        _, ops_two = await monitor.page(ops_next)
        _, failed = await monitor.page("/runs?kind=ops&state=failed")
        _, of_source = await monitor.page(f"/runs?kind=ops&connection={copy.source_id}")
        token = parse_qs(urlsplit(ops_next).query)["page"][0]
        crossed, refusal = await monitor.page(f"/runs?page={token}")
        async with asyncio.timeout(STREAM_DEADLINE):
            runs_live = monitor.stream("/runs/live")
            _, runs_streamed = await anext(runs_live)
            await runs_live.aclose()
            ops_live = monitor.stream("/runs/live?kind=ops")
            _, ops_streamed = await anext(ops_live)
            await ops_live.aclose()

    rows = lambda text: set(re.findall(r'<tr data-job="([^"]+)"', text))  # noqa: E731
    assert len(real) == 3 and len(operations) == 29
    assert len(rows(runs_page)) == 25 and rows(runs_page) | rows(runs_two) == set(runs)
    assert len(rows(ops_page)) == 25 and rows(ops_page) | rows(ops_two) == operations
    assert not rows(ops_page) & rows(ops_two)
    assert "kind=ops" in ops_next and '<svg class="chart"' not in ops_page
    assert rows(runs_streamed["html"]) == rows(runs_page)
    assert rows(ops_streamed["html"]) == rows(ops_page)
    assert 'aria-current="page">Connection operations</a>' in ops_page
    assert 'aria-current="page">Runs</a>' in runs_page
    (typo,) = rows(failed)
    assert typo in real and "itmes" in failed.split(f'data-job="{typo}"')[1]
    assert rows(of_source) == real and "test of copy-src" in of_source
    assert crossed == 400 and "issued for different filters" in refusal


def older(page: str) -> str:
    """The page's link to its next (older) page."""
    found = re.search(r'rel="next" href="([^"]+)"', page)
    assert found, page
    return found.group(1)


async def test_pipelines_run_now_and_show_their_last_run(
    server: Running, client: SetuClient, tenant: Tenant, tmp_path: Path
) -> None:
    copy = await make_copy(client, tmp_path)
    await client.update_pipeline(copy.pipeline_id, schedule="0 3 * * *")
    async with signed_in(server.http_url, tenant.api_key) as monitor:
        _, never = await monitor.page("/pipelines")
        status, location, _ = await monitor.post(
            f"/pipelines/{copy.pipeline_id}/run", {"csrf": await monitor.csrf()}
        )
        job_id = location.rsplit("/", 1)[-1]
        await client.wait_for_job(job_id)
        _, after = await monitor.page("/pipelines")

    assert "never run" in never and "<code>0 3 * * *</code> UTC" in never
    assert re.search(r"\d{4}-\d\d-\d\d 03:00:00Z", never)  # the next tick
    assert status == 303 and location == f"/runs/{job_id}"
    assert f'href="/runs/{job_id}"' in after and "state-succeeded" in after


async def test_connections_show_references_catalog_and_test_answers(
    server: Running, client: SetuClient, tenant: Tenant, tmp_path: Path
) -> None:
    copy = await make_copy(client, tmp_path)
    await client.discover_streams(copy.source_id)
    config = {"host": "db.example", "database": "d", "user": "u"}
    await client.create_connection("ref", "postgres", config | {"password": {"$secret": "PG_PW"}})
    async with signed_in(server.http_url, tenant.api_key) as monitor:
        status, location, _ = await monitor.post(
            f"/connections/{copy.source_id}/test", {"csrf": await monitor.csrf()}
        )
        _, page = await monitor.page(location)

    assert status == 303 and location.startswith("/connections?tested=")
    section = page.split(f'id="connection-{copy.source_id}"')[1].split("</section>")[0]
    assert "Test passed" in section
    assert re.search(r"<td>items</td>\s*<td>1</td>", section) and "<td>active</td>" in section
    assert '<span class="secret-ref">secret PG_PW</span>' in page


async def test_agents_show_presence_and_what_they_run(
    server: Running, client: SetuClient, tenant: Tenant, other: Tenant, tmp_path: Path
) -> None:
    async with signed_in(server.http_url, tenant.api_key) as monitor:
        _, offline = await monitor.page("/agents")
        await check_in(server.port, tenant.agent_token)
        copy = await make_copy(client, tmp_path)
        edge = await client.create_connection(
            "edge", "sqlite", {"path": "/x.db"}, placement="agent", agent_id=str(tenant.agent_id)
        )
        waiting = await client.create_pipeline("waits", edge.id, copy.destination_id)
        job = await client.submit_run(waiting.id)
        _, online = await monitor.page("/agents")
        _, run = await monitor.page(f"/runs/{job.id}")

    assert '"presence offline"' in offline and "never" in offline
    assert '"presence online"' in online and f'href="/runs/{job.id}">waits</a>' in online
    assert "extract on agent test agent" in run
    assert str(other.agent_id) not in online


async def test_a_run_finished_through_another_replica_reaches_this_ones_stream(
    database_url: str,
    server: Running,
    client: SetuClient,
    tenant: Tenant,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No keep-alive re-read to fall back on: only the watch hub can deliver.
    monkeypatch.setattr(live, "KEEPALIVE_SECONDS", 3600)
    copy = await make_copy(client, tmp_path)
    job = await client.submit_run(copy.pipeline_id, start=False)
    async with (
        in_process(database_url, worker_processes=0) as replica,
        signed_in(replica.http_url, tenant.api_key) as monitor,
    ):
        stream = monitor.stream(f"/runs/{job.id}/live?version={job.version}")
        async with asyncio.timeout(STREAM_DEADLINE):
            await client.start_job(job.id)  # runs on `server`'s cloud worker
            seen = [message async for message in stream]

    assert seen[-1] == ("end", {"state": "succeeded"})
    assert seen[-2][1]["state"] == "succeeded"
    assert "Loaded 7 of 7 rows" in "".join(data.get("events", "") for _, data in seen)


async def test_the_stream_of_a_run_that_is_over_sends_what_is_new_then_ends(
    server: Running, client: SetuClient, tenant: Tenant, tmp_path: Path
) -> None:
    # The page of a finished run streams from the version it drew: the
    # stream has nothing to send but its end, and closes.
    copy = await make_copy(client, tmp_path)
    job = await client.submit_run(copy.pipeline_id)
    done = await client.wait_for_job(job.id)
    async with signed_in(server.http_url, tenant.api_key) as monitor:
        _, page = await monitor.page(f"/runs/{job.id}")
        drawn = re.search(r'<article class="run" id="run"[^>]* data-live="([^"]+)"', page)
        assert drawn, page
        async with asyncio.timeout(STREAM_DEADLINE):  # a stream that never closes fails here
            as_drawn = [m async for m in monitor.stream(html.unescape(drawn.group(1)))]
            behind = [
                m
                async for m in monitor.stream(f"/runs/{job.id}/live?version={done.version}&after=0")
            ]

    assert done.state is JobState.SUCCEEDED, done.error_message
    assert as_drawn == [("end", {"state": "succeeded"})]
    # A page that has the version but not the events gets the events, then the end.
    assert [event for event, _ in behind] == ["run", "end"]
    assert "Loaded 7 of 7 rows" in behind[0][1]["events"]


async def test_a_failed_run_shows_its_error_and_offers_no_cancel(
    server: Running, client: SetuClient, tenant: Tenant, tmp_path: Path
) -> None:
    copy = await make_copy(client, tmp_path)
    (tmp_path / "source.db").unlink()
    job = await client.submit_run(copy.pipeline_id)
    outcome = await client.wait_for_job(job.id)
    async with signed_in(server.http_url, tenant.api_key) as monitor:
        _, page = await monitor.page(f"/runs/{job.id}")

    assert outcome.state is JobState.FAILED
    assert "state-failed" in page and "Cancel run" not in page
    assert f'<p class="error" role="alert">{html.escape(outcome.error_message)}</p>' in page


def test_each_stream_shows_its_own_rate() -> None:
    now = datetime(2030, 1, 1, 12, tzinfo=UTC)
    job = Job(
        id=uuid.uuid4(),
        workspace_id=uuid.uuid4(),
        kind=JobKind.RUN,
        state=ServerJobState.RUNNING,
        version=3,
        created_at=now,
        updated_at=now,
        rows_extracted=350,
        rows_loaded=300,
        started_at=now - timedelta(seconds=10),
    )
    outputs = [
        JobOutput("orders", rows_extracted=300, rows_loaded=300, checksum="", loaded=True),
        JobOutput("users", rows_extracted=50, rows_loaded=0, checksum="", loaded=False),
        JobOutput("empty", rows_extracted=0, rows_loaded=0, checksum="", loaded=False),
    ]
    view = reads.view_of(job, outputs, [], reads.Names(), now)
    shown = fragment("_run_progress.html", {"run": view})

    assert view.stream_rates == {"orders": 30.0, "users": 5.0}
    assert '<td class="num" data-rate="orders">30 rows/s</td>' in shown
    assert '<td class="num" data-rate="users">5.0 rows/s</td>' in shown
    assert '<td class="num" data-rate="empty">—</td>' in shown
    assert "300 · 30 rows/s" in shown  # the run's load rate


HOSTILE = "<script>alert(1)</script>"


async def test_what_a_tenant_names_renders_inert_in_pages_and_streams(
    server: Running, client: SetuClient, tenant: Tenant, tmp_path: Path
) -> None:
    # The stream (a source table), the connections, the pipeline, the
    # events and a failed run's error all carry markup a tenant chose.
    with sqlite3.connect(tmp_path / "source.db") as db:
        db.execute(f'CREATE TABLE "{HOSTILE}" (id INTEGER PRIMARY KEY)')
        db.executemany(f'INSERT INTO "{HOSTILE}" VALUES (?)', [(i,) for i in range(5)])
    source = await client.create_connection(
        f"{HOSTILE}-src", "sqlite", {"path": str(tmp_path / "source.db")}
    )
    into = await client.create_connection(
        f"{HOSTILE}-dst", "sqlite", {"path": str(tmp_path / "dst.db"), "create": True}
    )
    moved = await client.create_pipeline(HOSTILE, source.id, into.id, streams=[HOSTILE])
    broken = await client.create_pipeline(
        f"{HOSTILE}-broken", source.id, into.id, streams=[f"{HOSTILE}-missing"]
    )
    good = await client.submit_run(moved.id)
    bad = await client.submit_run(broken.id)
    succeeded = await client.wait_for_job(good.id)
    failed = await client.wait_for_job(bad.id)
    async with signed_in(server.http_url, tenant.api_key) as monitor:
        pages = [await monitor.page(path) for path in (*PAGES, f"/runs/{good.id}")]
        pages.append(await monitor.page(f"/runs/{bad.id}"))
        async with asyncio.timeout(STREAM_DEADLINE):
            streamed = [m async for m in monitor.stream(f"/runs/{good.id}/live")]
            streamed += [m async for m in monitor.stream(f"/runs/{bad.id}/live")]
        rows = monitor.stream("/runs/live")
        streamed.append(await anext(rows))
        await rows.aclose()

    assert succeeded.state is JobState.SUCCEEDED, succeeded.error_message
    assert failed.state is JobState.FAILED and HOSTILE in failed.error_message
    assert all(status == 200 for status, _ in pages)
    fragments = [text for _, data in streamed for text in data.values() if isinstance(text, str)]
    for text in [page for _, page in pages] + fragments:
        assert HOSTILE not in text
        assert "<script>alert" not in text
    escaped = escape(HOSTILE)
    run_page, failed_page = pages[-2][1], pages[-1][1]
    assert f'<td class="num" data-rate="{escaped}">' in run_page  # the stream's row
    assert f"<h1>{escaped} " in run_page  # the pipeline
    assert f'<p class="error" role="alert">{escape(failed.error_message)}</p>' in failed_page
    assert any(escaped in text for text in fragments)  # the streams carry it, escaped


async def test_connections_show_changed_and_missing_streams(
    server: Running, client: SetuClient, tenant: Tenant, tmp_path: Path
) -> None:
    copy = await make_copy(client, tmp_path)
    with sqlite3.connect(tmp_path / "source.db") as db:
        db.execute("CREATE TABLE gone (id INTEGER PRIMARY KEY)")
    await client.discover_streams(copy.source_id)
    with sqlite3.connect(tmp_path / "source.db") as db:
        db.execute("DROP TABLE gone")
        db.execute("ALTER TABLE items ADD COLUMN note TEXT")
    await client.discover_streams(copy.source_id)
    async with signed_in(server.http_url, tenant.api_key) as monitor:
        _, page = await monitor.page("/connections")

    section = page.split(f'id="connection-{copy.source_id}"')[1].split("</section>")[0]
    assert re.search(r'catalog-changed">\s*<td>items</td>\s*<td>2</td>', section), section
    assert re.search(r'catalog-missing">\s*<td>gone</td>', section), section
