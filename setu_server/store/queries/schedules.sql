-- Schedules: pipelines whose cron tick has come.

-- name: due_pipelines
-- Scheduled, unpaused pipelines whose next tick has come, locked (SKIP
-- LOCKED) so that exactly one replica fires each tick. $1 now, $2 limit
SELECT id, workspace_id, schedule, next_run_at
FROM pipeline
WHERE schedule IS NOT NULL AND NOT paused AND next_run_at <= coalesce($1, now())
ORDER BY next_run_at
LIMIT $2
FOR UPDATE SKIP LOCKED;

-- name: set_next_run
-- $1 pipeline_id, $2 next_run_at
UPDATE pipeline SET next_run_at = $2 WHERE id = $1;
