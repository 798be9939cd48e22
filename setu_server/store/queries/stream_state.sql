-- Stream state: the saved cursor of each incremental stream of a pipeline.

-- name: stream_cursors
-- The saved cursor of every stream of a pipeline. $1 pipeline_id
SELECT stream, cursor_value FROM pipeline_stream_state WHERE pipeline_id = $1;

-- name: pipeline_state
-- A pipeline's stream states, by stream; only in its workspace.
-- $1 pipeline_id, $2 workspace_id
SELECT s.* FROM pipeline_stream_state s
JOIN pipeline p ON p.id = s.pipeline_id
WHERE s.pipeline_id = $1 AND p.workspace_id = $2
ORDER BY s.stream;

-- name: advance_stream_state
-- Moves a stream's cursor to what a committed load carried (never backwards
-- is not enforced: a lookback or a reset may legitimately lower it).
-- $1 job_id, $2 stream, $3 cursor_column, $4 cursor_type, $5 cursor_value,
-- $6 rows, $7 now
INSERT INTO pipeline_stream_state AS s
    (pipeline_id, stream, cursor_column, cursor_type, cursor_value, rows, last_job_id, updated_at)
SELECT j.pipeline_id, $2, $3, $4, $5, $6, j.id, coalesce($7, now())
FROM job j WHERE j.id = $1 AND j.pipeline_id IS NOT NULL AND NOT j.dry_run
ON CONFLICT (pipeline_id, stream) DO UPDATE
SET cursor_column = excluded.cursor_column, cursor_type = excluded.cursor_type,
    cursor_value = excluded.cursor_value, rows = excluded.rows,
    last_job_id = excluded.last_job_id, updated_at = excluded.updated_at;

-- name: reset_stream_state
-- Forgets the saved cursor of one stream ($3) or all (null); returns the
-- streams reset. $1 pipeline_id, $2 workspace_id, $3 stream or null
DELETE FROM pipeline_stream_state s
USING pipeline p
WHERE p.id = s.pipeline_id AND s.pipeline_id = $1 AND p.workspace_id = $2
  AND ($3::text IS NULL OR s.stream = $3)
RETURNING s.stream;
