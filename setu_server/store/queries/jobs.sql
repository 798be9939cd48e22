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

-- name: get_jobs
-- Jobs by id, whatever their workspace (the watch hub's reads). $1 ids uuid[]
SELECT * FROM job WHERE id = ANY($1::uuid[]);

-- name: job_state
-- $1 id
SELECT state FROM job WHERE id = $1;

-- name: jobs_asked_to_cancel
-- Of the jobs $1, those still live that asked to stop, each with the reason
-- its cancel left waiting in error_message (a task's end then cancels it
-- rather than fail it). $1 ids uuid[]
SELECT id, error_message FROM job
WHERE id = ANY($1::uuid[]) AND cancel_requested AND state IN ('ready', 'pending', 'running');

-- name: transition_jobs
-- The one statement that changes a job's state (docs/jobs-and-tasks.md),
-- through the setu_transition_jobs function (migration 0002): moves every
-- job of $1 that is in one of the states $3 to $2, bumps its version,
-- appends an event and notifies `setu_job`, atomically.
-- $1 ids uuid[], $2 new state, $3 allowed current states text[],
-- $4 error_message (null keeps), $5 phase (null keeps), $6 event level,
-- $7 event message, $8 now, $9 result (null keeps)
SELECT * FROM setu_transition_jobs(
    $1::uuid[], $2::text, $3::text[], $4::text, $5::text, $6::text, $7::text,
    $8::timestamptz, $9::jsonb);

-- name: request_job_cancel
-- Marks a live job for cooperative cancellation, once; bumps its version and
-- notifies so watchers and runtimes see it. The reason waits in
-- error_message for the runtime to end the job. $1 id, $2 now, $3 reason
UPDATE job
SET cancel_requested = true, error_message = $3, version = version + 1,
    updated_at = coalesce($2, now())
WHERE id = $1 AND NOT cancel_requested AND state IN ('ready', 'pending', 'running')
RETURNING *,
    pg_notify('setu_job', setu_job_notice(job)) AS notified;

-- name: lock_job
-- A workspace's job, locked for a decision that spans several statements.
-- $1 id, $2 workspace_id
SELECT * FROM job WHERE id = $1 AND workspace_id = $2 FOR UPDATE;

-- name: insert_job_event
-- $1 job_id, $2 level, $3 stream, $4 message, $5 now
INSERT INTO job_event (job_id, level, stream, message, created_at)
VALUES ($1, $2, $3, $4, coalesce($5, now()))
RETURNING *;

-- name: list_jobs
-- Newest first, keyset-paginated on (created_at, id).
-- $1 workspace_id, $2 states text[] (empty: any), $3 kinds text[] (empty: any),
-- $4 pipeline_id, $5 connection_id, $6 created_after, $7 created_before,
-- $8 after created_at, $9 after id (the last row of the previous page), $10 limit
SELECT * FROM job
WHERE workspace_id = $1
  AND (cardinality($2::text[]) = 0 OR state = ANY($2::text[]))
  AND (cardinality($3::text[]) = 0 OR kind = ANY($3::text[]))
  AND ($4::uuid IS NULL OR pipeline_id = $4)
  AND ($5::uuid IS NULL OR connection_id = $5)
  AND ($6::timestamptz IS NULL OR created_at >= $6)
  AND ($7::timestamptz IS NULL OR created_at < $7)
  AND ($8::timestamptz IS NULL OR (created_at, id) < ($8, $9::uuid))
ORDER BY created_at DESC, id DESC
LIMIT $10;

-- name: list_job_events
-- Oldest first. $1 job_id, $2 after sequence, $3 limit
SELECT * FROM job_event WHERE job_id = $1 AND sequence > $2 ORDER BY sequence LIMIT $3;

-- name: job_outputs
-- Per-stream counts of a job, loaded or not. $1 job_id
SELECT stream, rows_extracted, rows_loaded, checksum, loaded_at IS NOT NULL AS loaded,
       rows_inserted, rows_updated, rows_unchanged, rows_deleted
FROM job_output WHERE job_id = $1 ORDER BY stream;

-- name: get_job_any
-- A job whatever its workspace, for server-internal decisions. $1 id
SELECT * FROM job WHERE id = $1;
