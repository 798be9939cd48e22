-- name: insert_agent
-- $1 id, $2 workspace_id, $3 name, $4 token_hash, $5 now
INSERT INTO agent (id, workspace_id, name, token_hash, created_at)
VALUES ($1, $2, $3, $4, coalesce($5, now()))
RETURNING id, workspace_id, name, active, version, capabilities, hostname,
          last_seen_at, created_at;

-- name: get_agent
-- $1 id
SELECT id, workspace_id, name, active, version, capabilities, hostname,
       last_seen_at, created_at
FROM agent WHERE id = $1;

-- name: list_agents
-- $1 workspace_id
SELECT id, workspace_id, name, active, version, capabilities, hostname,
       last_seen_at, created_at
FROM agent WHERE workspace_id = $1 ORDER BY name;

-- name: deactivate_agent
-- $1 id
UPDATE agent SET active = false WHERE id = $1
RETURNING id, workspace_id, name, active, version, capabilities, hostname,
          last_seen_at, created_at;

-- name: authenticate_agent
-- An active agent by token. Any agent call counts as presence, so this
-- refreshes last_seen_at, writing at most every 5 s: "online" means seen
-- within 90 s, and a write per call would cost every lease a WAL record.
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
-- $1 id, $2 version, $3 capabilities, $4 hostname, $5 now
UPDATE agent
SET version = $2, capabilities = $3, hostname = $4, last_seen_at = coalesce($5, now())
WHERE id = $1
RETURNING id, workspace_id, name, active, version, capabilities, hostname,
          last_seen_at, created_at;

-- name: database_now
-- The database's clock, for answers that report server time. $1 now
SELECT coalesce($1, now()) AS now;
