"""Work left waiting on an agent says so on its job's timeline: when the
agent signs off (once per sign-off), and when a run is submitted while the
agent it will need later is offline. Real PostgreSQL, a fake clock."""

from __future__ import annotations

from uuid import UUID

import asyncpg

from setu_server.models import EventLevel, JobEvent, JobKind, JobState
from setu_server.service.admin import AdminService
from setu_server.service.agents import AgentPresence
from setu_server.store import jobs, runs
from tests.builders import build_domain
from tests.factories import make_connection, make_job, make_pipeline, make_task, make_tenant


async def _warnings(pool: asyncpg.Pool, job_id: UUID) -> list[JobEvent]:
    events = await jobs.list_job_events(pool, job_id, after=0, limit=100)
    return [e for e in events if e.level is EventLevel.WARNING]


async def test_a_sign_off_warns_each_job_it_leaves_waiting_once(pool: asyncpg.Pool) -> None:
    domain = build_domain(pool)
    presence = AgentPresence(pool, domain.clock)
    tenant = await make_tenant(pool)
    runtime = str(tenant.agent_id)
    running_job = await make_job(pool, tenant.workspace_id, kind=JobKind.RUN)
    await make_task(pool, tenant, job=running_job, now=domain.clock.now())
    assert await domain.tasks.lease(runtime, 0) is not None, "leased: running there"
    queued_job = await make_job(pool, tenant.workspace_id, kind=JobKind.RUN)
    await make_task(pool, tenant, job=queued_job, now=domain.clock.now())
    elsewhere = await make_task(pool, tenant, cloud=True, now=domain.clock.now())
    ended = await make_job(pool, tenant.workspace_id, kind=JobKind.RUN, state=JobState.FAILED)
    await make_task(pool, tenant, job=ended, now=domain.clock.now())

    await presence.sign_off(tenant.agent_id, "stopping")

    [queued] = await _warnings(pool, queued_job.id)
    assert queued.message == "Agent test agent signed off; the run waits for it to come back"
    [running] = await _warnings(pool, running_job.id)
    assert running.message == (
        "Agent test agent signed off while running this run's task: it finishes within the "
        "agent's shutdown grace, or waits for the agent to come back"
    )
    assert await _warnings(pool, elsewhere.job_id) == [], "not on this agent"
    assert await _warnings(pool, ended.id) == [], "an ended job waits for nothing"

    await presence.sign_off(tenant.agent_id, "stopping")
    assert len(await _warnings(pool, queued_job.id)) == 1, "a repeated SignOff adds nothing"

    await presence.check_in(tenant.agent_id, "1.0", ["test"], "host")
    await presence.sign_off(tenant.agent_id, "stopping again")
    assert len(await _warnings(pool, queued_job.id)) == 2, "a new sign-off, a new line"


async def test_a_run_submitted_while_its_load_agent_is_offline_says_so(
    pool: asyncpg.Pool,
) -> None:
    domain = build_domain(pool)
    presence = AgentPresence(pool, domain.clock)
    tenant = await make_tenant(pool)
    admin = AdminService(pool, domain.clock)
    loader = (await admin.create_agent(tenant.workspace_id, "loader")).value
    pipeline = await make_pipeline(
        pool,
        tenant.workspace_id,
        source=await make_connection(pool, tenant.workspace_id, agent_id=tenant.agent_id),
        destination=await make_connection(pool, tenant.workspace_id, agent_id=loader.id),
    )
    await presence.check_in(tenant.agent_id, "1.0", ["extract"], "host")
    await presence.check_in(loader.id, "1.0", ["load"], "host")
    await presence.sign_off(loader.id, "stopping")

    job = await domain.runs.submit(
        tenant.workspace_id, pipeline.id, start=True, dry_run=False, idempotency_key=""
    )

    assert job.state is JobState.PENDING, "the extract's agent is online: accepted"
    [warning] = await _warnings(pool, job.id)
    assert warning.message.startswith(
        f"agent loader ({loader.id}) is offline (stopped at 2030-01-01 00:00:00 UTC): "
        "the load waits for it to come back (start it with `setu-agent"
    )

    still_offline = await domain.runs.submit(
        tenant.workspace_id, pipeline.id, start=True, dry_run=False, idempotency_key="again"
    )
    await presence.check_in(loader.id, "1.0", ["load"], "host")
    again = await domain.runs.submit(
        tenant.workspace_id, pipeline.id, start=True, dry_run=False, idempotency_key="online"
    )
    assert len(await _warnings(pool, still_offline.id)) == 1
    assert await _warnings(pool, again.id) == [], "its load agent is online now"


async def test_a_load_handed_to_an_offline_agent_says_so_on_its_stream(
    pool: asyncpg.Pool,
) -> None:
    domain = build_domain(pool)
    presence = AgentPresence(pool, domain.clock)
    tenant = await make_tenant(pool)
    loader = (await AdminService(pool, domain.clock).create_agent(tenant.workspace_id, "ld")).value
    pipeline = await make_pipeline(
        pool,
        tenant.workspace_id,
        source=await make_connection(pool, tenant.workspace_id, agent_id=tenant.agent_id),
        destination=await make_connection(pool, tenant.workspace_id, agent_id=loader.id),
    )
    await presence.check_in(tenant.agent_id, "1.0", ["extract"], "host")
    await presence.check_in(loader.id, "1.0", ["load"], "host")
    job = await domain.runs.submit(
        tenant.workspace_id, pipeline.id, start=True, dry_run=False, idempotency_key=""
    )
    assert await _warnings(pool, job.id) == [], "both agents online at submit"
    await runs.save_output(pool, job.id, "users", now=None, rows_extracted=3)
    domain.clock.advance(3600)  # the loader has gone quiet; the extract's agent finished

    assert await domain.runs.dispatch_load(pool, job) == 1

    [warning] = await _warnings(pool, job.id)
    assert warning.stream == "users"
    assert warning.message.startswith(
        f"agent ld ({loader.id}) is offline (last seen 2030-01-01 00:00:00 UTC): "
        "the load waits for it to come back"
    )
