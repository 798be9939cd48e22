-- 0013_run_counts: what a run's loaded rows were (inserted, updated,
-- unchanged, deleted by a merge) and how many rows its operator chain
-- dropped (filtered), kept as the run's counts beside extracted and loaded;
-- each stream's live counts while it moves (stream_progress: {stream:
-- {"extracted": n, "loaded": n}}), so a run's page shows a stream before it
-- ends. The job notice carries the new counts (not stream_progress: a
-- notice stays small).
ALTER TABLE job
    ADD COLUMN rows_filtered bigint NOT NULL DEFAULT 0,
    ADD COLUMN rows_inserted bigint NOT NULL DEFAULT 0,
    ADD COLUMN rows_updated bigint NOT NULL DEFAULT 0,
    ADD COLUMN rows_unchanged bigint NOT NULL DEFAULT 0,
    ADD COLUMN rows_deleted bigint NOT NULL DEFAULT 0,
    ADD COLUMN stream_progress jsonb NOT NULL DEFAULT '{}';

ALTER TABLE job_output ADD COLUMN rows_deleted bigint;

CREATE OR REPLACE FUNCTION setu_job_notice(j job) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    full_notice text := json_build_object(
        'job_id', j.id, 'version', j.version, 'state', j.state,
        'snapshot', json_build_object(
            'phase', j.phase, 'cancel_requested', j.cancel_requested,
            'error_message', j.error_message, 'rows_extracted', j.rows_extracted,
            'rows_loaded', j.rows_loaded, 'rows_total', j.rows_total,
            'rows_filtered', j.rows_filtered, 'rows_inserted', j.rows_inserted,
            'rows_updated', j.rows_updated, 'rows_unchanged', j.rows_unchanged,
            'rows_deleted', j.rows_deleted,
            'extract_runtime', j.extract_runtime, 'load_runtime', j.load_runtime,
            'result', j.result, 'updated_at', j.updated_at, 'started_at', j.started_at,
            'finished_at', j.finished_at))::text;
BEGIN
    IF octet_length(full_notice) < 8000 THEN
        RETURN full_notice;
    END IF;
    RETURN json_build_object('job_id', j.id, 'version', j.version, 'state', j.state)::text;
END;
$$;
