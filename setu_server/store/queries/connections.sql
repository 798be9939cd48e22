-- name: insert_connection
-- $1 id, $2 workspace_id, $3 name, $4 provider, $5 config, $6 placement,
-- $7 agent_id, $8 now
INSERT INTO connection (id, workspace_id, name, provider, config, placement, agent_id,
                        created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, coalesce($8, now()), coalesce($8, now()))
RETURNING *;

-- name: get_connection
-- A connection of one workspace: another workspace's is not found.
-- $1 id, $2 workspace_id
SELECT * FROM connection WHERE id = $1 AND workspace_id = $2;

-- name: lock_connection
-- A workspace's connection, locked against concurrent change for a
-- read-decide-write; pipelines may still start referencing it meanwhile.
-- $1 id, $2 workspace_id
SELECT * FROM connection WHERE id = $1 AND workspace_id = $2 FOR NO KEY UPDATE;

-- name: lock_connection_to_delete
-- A workspace's connection, locked so no pipeline can start referencing it
-- between the check for users and the delete. $1 id, $2 workspace_id
SELECT * FROM connection WHERE id = $1 AND workspace_id = $2 FOR UPDATE;

-- name: hold_connection
-- Whether a workspace's connection exists, keeping it from being deleted
-- until the transaction ends (a pipeline is about to reference it); the
-- lock does not block other readers or updates. $1 id, $2 workspace_id
SELECT id FROM connection WHERE id = $1 AND workspace_id = $2 FOR KEY SHARE;

-- name: list_connections
-- Ordered by name (unique per workspace), keyset-paginated on it.
-- $1 workspace_id, $2 provider ('' for any), $3 after name (null for the
-- first page), $4 limit
SELECT * FROM connection
WHERE workspace_id = $1
  AND ($2::text = '' OR provider = $2)
  AND ($3::text IS NULL OR name > $3)
ORDER BY name
LIMIT $4;

-- name: update_connection
-- Replaces every mutable field. $1 id, $2 workspace_id, $3 name, $4 provider,
-- $5 config, $6 placement, $7 agent_id, $8 now
UPDATE connection
SET name = $3, provider = $4, config = $5, placement = $6, agent_id = $7,
    updated_at = coalesce($8, now())
WHERE id = $1 AND workspace_id = $2
RETURNING *;

-- name: delete_connection
-- Its catalog rows go with it (ON DELETE CASCADE). $1 id, $2 workspace_id
DELETE FROM connection WHERE id = $1 AND workspace_id = $2 RETURNING id;
