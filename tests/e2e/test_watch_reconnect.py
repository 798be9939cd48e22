"""After the listener reconnects, the watch hub re-checks every watched job:
a change it never heard of (its notification lost with the session) wakes
the waiter, and jobs that did not change are not read again."""

from __future__ import annotations

import asyncio
import contextlib

import asyncpg
import pytest

from setu_server.models import JobState
from setu_server.server import Running
from tests.factories import Tenant, make_job, parked_wait


# No periodic re-check during the test: only the reconnect's can wake it.
@pytest.mark.server(watch_recheck_seconds=3600)
async def test_a_change_missed_with_the_listen_session_wakes_its_waiter_after_reconnect(
    server: Running, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    missed = await make_job(pool, tenant.workspace_id, state=JobState.RUNNING)
    quiet = await make_job(pool, tenant.workspace_id, state=JobState.RUNNING)
    wait = await parked_wait(server, tenant, missed)
    other = await parked_wait(server, tenant, quiet)
    # A plain UPDATE sends no NOTIFY: as if its notification had been lost.
    await pool.execute(
        "UPDATE job SET state = 'succeeded', version = version + 1, finished_at = now() "
        "WHERE id = $1",
        missed.id,
    )
    reads, fetched = server.hub.reads, server.hub.fetched
    sessions = server.listener.sessions
    killed = await pool.fetchval(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name = 'setu-listener' AND datname = current_database()"
    )
    assert killed == 1
    await asyncio.wait_for(server.listener.wait_for_session(sessions + 1), 30)
    answer = await asyncio.wait_for(wait, 30)
    assert answer.state is JobState.SUCCEEDED and answer.version == missed.version + 1
    assert server.hub.reads - reads == 2, "both watched jobs were checked"
    assert server.hub.fetched - fetched == 1, "only the changed one came back"
    assert not other.done()
    other.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await other
