-- name: insert_job
-- $1 id, $2 workspace_id, $3 kind, $4 state, $5 pipeline_id, $6 connection_id,
-- $7 params, $8 dry_run, $9 idempotency_key, $10 scheduled_for, $11 now
INSERT INTO job (id, workspace_id, kind, state, pipeline_id, connection_id, params,
                 dry_run, idempotency_key, scheduled_for, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, coalesce($11, now()), coalesce($11, now()))
RETURNING *;

-- name: get_job
-- A job of one workspace: another workspace's job is not found. $1 id, $2 workspace_id
SELECT * FROM job WHERE id = $1 AND workspace_id = $2;
