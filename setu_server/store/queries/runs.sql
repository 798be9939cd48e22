-- Runs: the bookkeeping of a pipeline run as its runtimes move data.
-- Progress writes bump the job's version and notify `setu_job` like a
-- transition does (without touching state), so WatchJob shows them.

-- name: pipeline_for_run
-- A pipeline with both its connections, for a new run. $1 pipeline_id, $2 workspace_id
SELECT p.id, p.workspace_id, p.name, p.streams, p.spec, p.write_mode,
       s.id AS source_id, s.name AS source_name, s.provider AS source_provider,
       s.placement AS source_placement, s.agent_id AS source_agent_id,
       d.id AS destination_id, d.name AS destination_name, d.provider AS destination_provider,
       d.placement AS destination_placement, d.agent_id AS destination_agent_id
FROM pipeline p
JOIN connection s ON s.id = p.source_connection_id
JOIN connection d ON d.id = p.destination_connection_id
WHERE p.id = $1 AND p.workspace_id = $2;

-- name: job_by_idempotency_key
-- $1 workspace_id, $2 idempotency_key
SELECT * FROM job WHERE workspace_id = $1 AND idempotency_key = $2;

-- name: connection_for_runtime
-- A connection as a runtime needs it (config with secret references). $1 id
SELECT id, workspace_id, provider, config, placement, agent_id FROM connection WHERE id = $1;

-- name: set_run_progress
-- Absolute row counts of a run; answers whether it was asked to cancel.
-- What the loaded rows were (inserted, updated, unchanged, deleted) and the
-- rows the operator chain dropped (filtered: extracted - loaded) are summed
-- over the streams whose load committed, so they always add up to them.
-- $1 job_id, $2 rows_extracted, $3 rows_loaded, $4 now,
-- $5 stream_progress (each moving stream's counts; null keeps)
UPDATE job
SET rows_extracted = $2, rows_loaded = $3, version = version + 1,
    rows_filtered = done.filtered, rows_inserted = done.inserted,
    rows_updated = done.updated, rows_unchanged = done.unchanged,
    rows_deleted = done.deleted,
    stream_progress = coalesce($5::jsonb, job.stream_progress),
    updated_at = coalesce($4, now())
FROM (
    SELECT coalesce(sum(greatest(o.rows_extracted - o.rows_loaded, 0)), 0) AS filtered,
           coalesce(sum(o.rows_inserted), 0) AS inserted,
           coalesce(sum(o.rows_updated), 0) AS updated,
           coalesce(sum(o.rows_unchanged), 0) AS unchanged,
           coalesce(sum(o.rows_deleted), 0) AS deleted
    FROM job_output o WHERE o.job_id = $1 AND o.loaded_at IS NOT NULL
) AS done
WHERE job.id = $1
RETURNING job.cancel_requested,
    pg_notify('setu_job', setu_job_notice(job)) AS notified;

-- name: set_run_plan
-- What a run expects to move and where its stages run; null keeps a value.
-- $1 job_id, $2 rows_total, $3 extract_runtime, $4 load_runtime, $5 now
UPDATE job
SET rows_total = coalesce($2, rows_total),
    extract_runtime = coalesce($3, extract_runtime),
    load_runtime = coalesce($4, load_runtime),
    version = version + 1, updated_at = coalesce($5, now())
WHERE id = $1
RETURNING pg_notify('setu_job', setu_job_notice(job)) AS notified;

-- name: save_artifact
-- What an extract staged for one stream; a re-extract replaces it.
-- $1 id, $2 job_id, $3 task_id, $4 stream, $5 blob_prefix, $6 parts text[],
-- $7 rows, $8 checksum, $9 now
INSERT INTO artifact (id, job_id, task_id, stream, blob_prefix, parts, rows, checksum, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, coalesce($9, now()))
ON CONFLICT (job_id, stream) DO UPDATE
SET task_id = EXCLUDED.task_id, blob_prefix = EXCLUDED.blob_prefix, parts = EXCLUDED.parts,
    rows = EXCLUDED.rows, checksum = EXCLUDED.checksum, created_at = EXCLUDED.created_at;

-- name: save_output
-- One stream's counts; null keeps a value. $1 job_id, $2 stream,
-- $3 rows_extracted, $4 rows_loaded, $5 checksum, $6 loaded (marks loaded_at), $7 now,
-- $8 rows_inserted, $9 rows_updated, $10 rows_unchanged, $11 rows_deleted
INSERT INTO job_output (job_id, stream, rows_extracted, rows_loaded, checksum, loaded_at,
                        updated_at, rows_inserted, rows_updated, rows_unchanged, rows_deleted)
VALUES ($1, $2, coalesce($3, 0), coalesce($4, 0), coalesce($5, ''),
        CASE WHEN $6 THEN coalesce($7, now()) END, coalesce($7, now()), $8, $9, $10, $11)
ON CONFLICT (job_id, stream) DO UPDATE
SET rows_extracted = coalesce($3, job_output.rows_extracted),
    rows_loaded = coalesce($4, job_output.rows_loaded),
    checksum = coalesce($5, job_output.checksum),
    loaded_at = CASE WHEN $6 THEN coalesce($7, now()) ELSE job_output.loaded_at END,
    updated_at = coalesce($7, now()),
    rows_inserted = coalesce($8, job_output.rows_inserted),
    rows_updated = coalesce($9, job_output.rows_updated),
    rows_unchanged = coalesce($10, job_output.rows_unchanged),
    rows_deleted = coalesce($11, job_output.rows_deleted);

-- name: set_run_phase
-- Where a running run is (extract, load, direct), with an event; the row
-- when it moved. Not a transition: the state stays running.
-- $1 job_id, $2 phase, $3 event message, $4 now
WITH moved AS (
    UPDATE job SET phase = $2, version = version + 1, updated_at = coalesce($4, now())
    WHERE id = $1 AND state = 'running'
    RETURNING *, pg_notify('setu_job', setu_job_notice(job)) AS notified
), logged AS (
    INSERT INTO job_event (job_id, level, message, created_at)
    SELECT id, 'info', $3, coalesce($4, now()) FROM moved
)
SELECT moved.* FROM moved;

-- name: runs_to_purge
-- Ended runs whose staged data has outlived the retention, with every
-- prefix they staged under; locked (SKIP LOCKED) so one replica purges each.
-- $1 now, $2 retention seconds, $3 limit, $4 ids to pass over uuid[]
SELECT j.id, j.workspace_id, j.pipeline_id,
       coalesce(array_agg(DISTINCT a.blob_prefix) FILTER (WHERE a.blob_prefix IS NOT NULL),
                '{}')::text[] AS prefixes
FROM (
    SELECT id, workspace_id, pipeline_id FROM job
    WHERE kind = 'run' AND staged_purged_at IS NULL AND finished_at IS NOT NULL
      AND finished_at < coalesce($1, now()) - make_interval(secs => $2)
      AND NOT (id = ANY($4::uuid[]))
    ORDER BY finished_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
) j
LEFT JOIN artifact a ON a.job_id = j.id
GROUP BY j.id, j.workspace_id, j.pipeline_id;

-- name: mark_staged_purged
-- $1 ids uuid[], $2 now
UPDATE job SET staged_purged_at = coalesce($2, now()) WHERE id = ANY($1::uuid[]);

-- name: record_run_parts
-- Parts an extract stored whole; a part stored again (a re-read) replaces it.
-- $1 job_id, $2 stream_index int[], $3 number int[], $4 stream text[],
-- $5 path text[], $6 rows bigint[], $7 bytes bigint[], $8 sha256 text[],
-- $9 position text[], $10 now
INSERT INTO run_part (job_id, stream_index, number, stream, path, rows, bytes, sha256,
                      position, stored_at)
SELECT $1, p.stream_index, p.number, p.stream, p.path, p.rows, p.bytes, p.sha256,
       p.position, coalesce($10, now())
FROM unnest($2::int[], $3::int[], $4::text[], $5::text[], $6::bigint[], $7::bigint[],
            $8::text[], $9::text[])
     AS p (stream_index, number, stream, path, rows, bytes, sha256, position)
ON CONFLICT (job_id, stream_index, number) DO UPDATE
SET stream = EXCLUDED.stream, path = EXCLUDED.path, rows = EXCLUDED.rows,
    bytes = EXCLUDED.bytes, sha256 = EXCLUDED.sha256, position = EXCLUDED.position,
    stored_at = EXCLUDED.stored_at;

-- name: run_parts
-- The parts a run's extract stored, in order. $1 job_id
SELECT stream_index, number, stream, path, rows, bytes, sha256, position
FROM run_part
WHERE job_id = $1
ORDER BY stream_index, number;
