-- name: count_open_tasks
-- The task queue's census for the metrics: pending and leased tasks by
-- runtime and kind (both states have a partial index of their own).
-- No parameters.
SELECT runtime, kind, state, count(*)::bigint AS tasks
FROM task
WHERE state IN ('pending', 'leased')
GROUP BY runtime, kind, state;
