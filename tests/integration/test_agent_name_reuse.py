"""An agent's name is unique among the workspace's active agents only
(migration 0014): a deactivated agent's name is taken again, both then read
with their short ids, and the agents listing pages through them by (name,
id). Real PostgreSQL. (Apart from tests/e2e/test_agent_names.py: test basenames are unique.)"""

from __future__ import annotations

import asyncpg
import pytest

from setu_client.clock import SystemClock
from setu_client.errors import AlreadyExists
from setu_server.service.admin import AdminService
from setu_server.service.agents import AgentPresence
from setu_server.service.naming import names_for, short_id
from tests.factories import make_tenant


async def test_a_deactivated_agents_name_is_taken_again_and_both_read_with_short_ids(
    pool: asyncpg.Pool,
) -> None:
    admin = AdminService(pool, SystemClock())
    tenant = await make_tenant(pool)
    old = tenant.agent_id  # "test agent"
    await admin.deactivate_agent(old)
    new = (await admin.create_agent(tenant.workspace_id, "test agent")).value.id
    with pytest.raises(AlreadyExists, match="an agent named 'test agent' already exists"):
        await admin.create_agent(tenant.workspace_id, "test agent")
    other = (await admin.create_agent(tenant.workspace_id, "solo")).value.id

    names = await names_for(pool, tenant.workspace_id, {old, new, other})
    listed, token, pages = [], "", 0
    presence = AgentPresence(pool, SystemClock())
    while True:
        page, token = await presence.list_agents(tenant.workspace_id, None, 1, token)
        listed += [status.agent.id for status in page]
        pages += 1
        if not token:
            break

    assert names.agent_label(old) == f"agent test agent ({short_id(old)})"
    assert names.agent_label(new) == f"agent test agent ({short_id(new)})"
    assert names.agent_label(other) == "agent solo"
    assert sorted(listed) == sorted([old, new, other]) and len(listed) == 3 == pages
