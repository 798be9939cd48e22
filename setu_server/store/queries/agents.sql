-- name: insert_agent
-- $1 id, $2 workspace_id, $3 name, $4 token_hash, $5 now
INSERT INTO agent (id, workspace_id, name, token_hash, created_at)
VALUES ($1, $2, $3, $4, coalesce($5, now()))
RETURNING id, workspace_id, name, active, version, capabilities, hostname,
          last_seen_at, created_at, signed_off_at;

-- name: get_agent
-- $1 id
SELECT id, workspace_id, name, active, version, capabilities, hostname,
       last_seen_at, created_at, signed_off_at
FROM agent WHERE id = $1;

-- name: list_agents
-- $1 workspace_id
SELECT id, workspace_id, name, active, version, capabilities, hostname,
       last_seen_at, created_at, signed_off_at
FROM agent WHERE workspace_id = $1 ORDER BY name, id;

-- name: deactivate_agent
-- $1 id
UPDATE agent SET active = false WHERE id = $1
RETURNING id, workspace_id, name, active, version, capabilities, hostname,
          last_seen_at, created_at, signed_off_at;

-- name: authenticate_agent
-- An active agent by token. Any agent call counts as presence, so this
-- refreshes last_seen_at, writing at most every 5 s: the presence window is
-- far longer (service/agents.py), and a write per call would cost every
-- lease a WAL record.
-- $1 token_hash, $2 now
WITH found AS (
    SELECT id, workspace_id, last_seen_at FROM agent WHERE token_hash = $1 AND active
), touched AS (
    UPDATE agent SET last_seen_at = coalesce($2, now())
    FROM found
    WHERE agent.id = found.id
      AND (found.last_seen_at IS NULL
           OR found.last_seen_at < coalesce($2, now()) - interval '5 seconds')
)
SELECT id, workspace_id FROM found;

-- name: check_in_agent
-- Checking in ends a sign-off: the agent is back.
-- $1 id, $2 version, $3 capabilities, $4 hostname, $5 now
UPDATE agent
SET version = $2, capabilities = $3, hostname = $4, last_seen_at = coalesce($5, now()),
    signed_off_at = NULL
WHERE id = $1
RETURNING id, workspace_id, name, active, version, capabilities, hostname,
          last_seen_at, created_at, signed_off_at;

-- name: sign_off_agent
-- A graceful stop: offline at once, until the next check-in. $1 id, $2 now
UPDATE agent SET signed_off_at = coalesce($2, now()), last_seen_at = coalesce($2, now())
WHERE id = $1;

-- name: touch_agent
-- Presence from a LeaseTask parking or ending, throttled like
-- authenticate_agent. $1 id, $2 now
UPDATE agent SET last_seen_at = coalesce($2, now())
WHERE id = $1
  AND (last_seen_at IS NULL OR last_seen_at < coalesce($2, now()) - interval '5 seconds');

-- name: list_workspace_agents
-- A workspace's agents by name, keyset-paginated on (name, id): a name is
-- unique among active agents only, so a deactivated one may share it.
-- $1 workspace_id, $2 only this agent (null: all), $3 after name (null: from
-- the start), $4 limit, $5 after id (with $3)
SELECT id, workspace_id, name, active, version, capabilities, hostname,
       last_seen_at, created_at, signed_off_at
FROM agent
WHERE workspace_id = $1 AND ($2::uuid IS NULL OR id = $2)
  AND ($3::text IS NULL OR (name, id) > ($3, $5::uuid))
ORDER BY name, id
LIMIT $4;

-- name: agents_leased_tasks
-- The tasks some agents of a workspace hold now, oldest first.
-- $1 workspace_id, $2 agent ids (uuid[])
SELECT t.agent_id, t.id, t.job_id, j.pipeline_id, t.kind, t.attempt, t.lease_expires_at
FROM task t JOIN job j ON j.id = t.job_id
WHERE t.workspace_id = $1 AND t.runtime = ANY($2::uuid[]::text[]) AND t.state = 'leased'
ORDER BY t.created_at, t.id;

-- name: agents_queued_tasks
-- How many tasks wait for each of some agents of a workspace.
-- $1 workspace_id, $2 agent ids (uuid[])
SELECT t.agent_id, count(*) AS queued
FROM task t
WHERE t.workspace_id = $1 AND t.runtime = ANY($2::uuid[]::text[]) AND t.state = 'pending'
GROUP BY t.agent_id;

-- name: database_now
-- The database's clock, for answers that report server time. $1 now
SELECT coalesce($1, now()) AS now;

-- name: list_active_agents
-- Every active agent across workspaces: for the metrics, never for callers.
-- No parameters.
SELECT id, workspace_id, name, active, version, capabilities, hostname,
       last_seen_at, created_at, signed_off_at
FROM agent WHERE active;

-- name: agent_names
-- Some agents of a workspace as people read them: the name, and whether
-- another agent of the workspace has a name that reads the same (equal
-- ignoring case), so a label must add the short id. One statement for a
-- whole answer (a page of jobs, of events), never one per row.
-- $1 workspace_id, $2 agent ids (uuid[])
SELECT a.id, a.name,
       EXISTS (SELECT 1 FROM agent b
               WHERE b.workspace_id = a.workspace_id AND b.id <> a.id
                 AND lower(b.name) = lower(a.name)) AS shared
FROM agent a
WHERE a.workspace_id = $1 AND a.id = ANY($2::uuid[]);
