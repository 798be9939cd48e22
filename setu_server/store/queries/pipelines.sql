-- name: insert_pipeline
-- $1 id, $2 workspace_id, $3 name, $4 source_connection_id,
-- $5 destination_connection_id, $6 streams text[], $7 spec, $8 write_mode,
-- $9 schedule (null: manual only), $10 paused, $11 next_run_at, $12 now
INSERT INTO pipeline (id, workspace_id, name, source_connection_id, destination_connection_id,
                      streams, spec, write_mode, schedule, paused, next_run_at,
                      created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, coalesce($12, now()), coalesce($12, now()))
RETURNING *;

-- name: get_pipeline
-- A pipeline of one workspace: another workspace's is not found.
-- $1 id, $2 workspace_id
SELECT * FROM pipeline WHERE id = $1 AND workspace_id = $2;

-- name: lock_pipeline
-- A workspace's pipeline, locked for a read-decide-write (update, delete).
-- $1 id, $2 workspace_id
SELECT * FROM pipeline WHERE id = $1 AND workspace_id = $2 FOR UPDATE;

-- name: list_pipelines
-- Ordered by name (unique per workspace), keyset-paginated on it.
-- $1 workspace_id, $2 after name (null for the first page), $3 limit
SELECT * FROM pipeline
WHERE workspace_id = $1 AND ($2::text IS NULL OR name > $2)
ORDER BY name
LIMIT $3;

-- name: update_pipeline
-- Replaces every mutable field. $1 id, $2 workspace_id, $3 name,
-- $4 source_connection_id, $5 destination_connection_id, $6 streams text[],
-- $7 spec, $8 write_mode, $9 schedule (null: manual only), $10 paused,
-- $11 next_run_at, $12 now
UPDATE pipeline
SET name = $3, source_connection_id = $4, destination_connection_id = $5, streams = $6,
    spec = $7, write_mode = $8, schedule = $9, paused = $10, next_run_at = $11,
    updated_at = coalesce($12, now())
WHERE id = $1 AND workspace_id = $2
RETURNING *;

-- name: delete_pipeline
-- Its runs stay, unlinked (job.pipeline_id is ON DELETE SET NULL).
-- $1 id, $2 workspace_id
DELETE FROM pipeline WHERE id = $1 AND workspace_id = $2 RETURNING id;

-- name: pipelines_using_connection
-- Names of the pipelines reading from or writing to a connection.
-- $1 connection_id
SELECT name FROM pipeline
WHERE source_connection_id = $1 OR destination_connection_id = $1
ORDER BY name;

-- name: active_pipeline_run
-- The oldest run of a pipeline that is pending or running, if any.
-- $1 pipeline_id
SELECT id FROM job
WHERE pipeline_id = $1 AND kind = 'run' AND state IN ('pending', 'running')
ORDER BY created_at, id
LIMIT 1;

-- name: ready_pipeline_runs
-- The runs of a pipeline submitted with start = false and not yet started:
-- deleting the pipeline cancels them (they could never run without it).
-- Locked, so none starts until the delete commits; one a StartJob holds is
-- re-read once free, and left out when it has started.
-- $1 pipeline_id
SELECT id FROM job
WHERE pipeline_id = $1 AND kind = 'run' AND state = 'ready'
ORDER BY created_at, id
FOR UPDATE;
