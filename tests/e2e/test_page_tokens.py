"""Page tokens across replicas: every server process that shares
SETU_PAGE_TOKEN_KEY reads the others' tokens, whatever its string hashes.

Each replica is a process of its own, with its own PYTHONHASHSEED, as real
replicas have: in one process a set's order never varies, so only separate
processes show a token bound to a spelling that does."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid

import pytest

from setu_server.models import JobFilter, JobKind, JobState
from setu_server.service import paging
from setu_server.service.jobs import listing_query

WORKSPACE = uuid.UUID(int=7)
# What the monitor's Connection operations tab lists, with two states: sets
# of three and two members, which string hashes order differently.
FILTER = (
    "JobFilter(kinds=frozenset(JobKind) - {JobKind.RUN},"
    " states=frozenset({JobState.FAILED, JobState.SUCCEEDED}))"
)
REPLICA = f"""
import uuid
from setu_server.models import JobFilter, JobKind, JobState
from setu_server.service import paging
from setu_server.service.jobs import listing_query
paging.use_key("shared")
print(paging.encode({{"id": "x"}}, listing_query(uuid.UUID(int=7), {FILTER})))
"""


async def token_of_a_replica(hash_seed: int) -> str:
    env = os.environ | {"PYTHONHASHSEED": str(hash_seed)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", REPLICA, env=env, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await process.communicate()
    assert process.returncode == 0
    return out.decode().strip()


async def test_a_token_of_several_kinds_and_states_is_read_by_every_replica(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Seeds 0 and 1 order these sets differently (a fixed seed, a fixed order).
    tokens = await asyncio.gather(token_of_a_replica(0), token_of_a_replica(1))
    monkeypatch.setattr(paging, "_key", paging._key)  # put back after the test
    paging.use_key("shared")
    here = JobFilter(
        kinds=frozenset(JobKind) - {JobKind.RUN},
        states=frozenset({JobState.SUCCEEDED, JobState.FAILED}),
    )

    assert len(set(tokens)) == 1, tokens
    assert paging.decode(tokens[0], listing_query(WORKSPACE, here)) == {"id": "x"}
