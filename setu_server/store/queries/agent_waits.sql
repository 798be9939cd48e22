-- name: lock_agent_for_sign_off
-- The agent's name and sign-off, its row locked until the caller commits, so
-- concurrent sign-offs see each other and warn the agent's jobs once.
-- $1 agent id
SELECT name, signed_off_at FROM agent WHERE id = $1 FOR UPDATE;

-- name: jobs_waiting_on_agent
-- Unfinished jobs with a task queued on the agent (pending) or running there
-- (leased), oldest first; `running` when none of the job's tasks there is
-- merely queued. $1 the agent's runtime (its id as text)
SELECT t.job_id, j.kind, bool_and(t.state = 'leased') AS running
FROM task t
JOIN job j ON j.id = t.job_id
WHERE t.runtime = $1
  AND t.state IN ('pending', 'leased')
  AND j.state IN ('pending', 'running')
GROUP BY t.job_id, j.kind, j.created_at
ORDER BY j.created_at, t.job_id;
