-- Schedules: pipelines whose cron tick has come.

-- name: due_pipelines
-- Scheduled, unpaused pipelines whose next tick has come, with both their
-- connections, locked (SKIP LOCKED) so that exactly one replica fires each
-- tick. $1 now, $2 limit
SELECT p.id, p.workspace_id, p.name, p.streams, p.spec, p.write_mode, p.schedule,
       p.next_run_at,
       s.id AS source_id, s.name AS source_name, s.provider AS source_provider,
       s.placement AS source_placement, s.agent_id AS source_agent_id,
       d.id AS destination_id, d.name AS destination_name, d.provider AS destination_provider,
       d.placement AS destination_placement, d.agent_id AS destination_agent_id
FROM pipeline p
JOIN connection s ON s.id = p.source_connection_id
JOIN connection d ON d.id = p.destination_connection_id
WHERE p.schedule IS NOT NULL AND NOT p.paused AND p.next_run_at <= coalesce($1, now())
ORDER BY p.next_run_at
LIMIT $2
FOR UPDATE OF p SKIP LOCKED;

-- name: set_next_run
-- $1 pipeline_id, $2 next_run_at
UPDATE pipeline SET next_run_at = $2 WHERE id = $1;
