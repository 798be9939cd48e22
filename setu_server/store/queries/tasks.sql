-- name: count_leased_tasks
-- Tasks of a job that a runtime holds right now. $1 job_id
SELECT count(*) FROM task WHERE job_id = $1 AND state = 'leased';

-- name: cancel_pending_tasks
-- $1 job_id, $2 now
UPDATE task SET state = 'cancelled', updated_at = coalesce($2, now()),
                finished_at = coalesce($2, now())
WHERE job_id = $1 AND state = 'pending';

-- name: insert_task
-- $1 id, $2 job_id, $3 workspace_id, $4 kind, $5 runtime ('cloud' or an agent id),
-- $6 agent_id, $7 max_attempts, $8 payload, $9 now
INSERT INTO task (id, job_id, workspace_id, kind, state, runtime, agent_id, max_attempts,
                  run_after, payload, created_at, updated_at)
VALUES ($1, $2, $3, $4, 'pending', $5, $6, $7, coalesce($9, now()), $8,
        coalesce($9, now()), coalesce($9, now()))
RETURNING *;
