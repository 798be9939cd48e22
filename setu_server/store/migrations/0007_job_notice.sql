-- 0007_job_notice: a `setu_job` notification carries the job's snapshot, so
-- a server wakes its waiters from the notification alone, with no read
-- (docs/architecture.md). Only a snapshot that would pass PostgreSQL's
-- 8,000-byte payload limit (a long error message, a large result) goes as
-- {job_id, version, state}, and the hub reads that job.

-- The payload of a `setu_job` notification for one job row: {job_id,
-- version, state, snapshot: {what a transition or progress write changes}},
-- or, past 7,999 bytes, without the snapshot.
CREATE FUNCTION setu_job_notice(j job) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN octet_length(full_notice) < 8000 THEN full_notice
                ELSE json_build_object(
                    'job_id', j.id, 'version', j.version, 'state', j.state)::text END
    FROM (SELECT json_build_object(
        'job_id', j.id, 'version', j.version, 'state', j.state,
        'snapshot', json_build_object(
            'phase', j.phase, 'cancel_requested', j.cancel_requested,
            'error_message', j.error_message, 'rows_extracted', j.rows_extracted,
            'rows_loaded', j.rows_loaded, 'rows_total', j.rows_total,
            'extract_runtime', j.extract_runtime, 'load_runtime', j.load_runtime,
            'result', j.result, 'updated_at', j.updated_at, 'started_at', j.started_at,
            'finished_at', j.finished_at))::text AS full_notice) AS notice
$$;

CREATE OR REPLACE FUNCTION setu_transition_jobs(
    p_ids uuid[],
    p_to text,
    p_from text[],
    p_error text,
    p_phase text,
    p_level text,
    p_message text,
    p_now timestamptz,
    p_result jsonb
) RETURNS SETOF job
LANGUAGE plpgsql VOLATILE AS $$
-- plpgsql, not sql: its statements' plans are cached per session, where a
-- sql function with data-modifying CTEs is planned again on every call.
DECLARE
    moved job;
BEGIN
    FOR moved IN
        UPDATE job
        SET state = p_to,
            version = version + 1,
            error_message = coalesce(p_error, error_message),
            phase = coalesce(p_phase, phase),
            started_at = CASE WHEN p_to = 'running'
                              THEN coalesce(started_at, coalesce(p_now, now()))
                              ELSE started_at END,
            finished_at = CASE WHEN p_to IN ('succeeded', 'failed', 'cancelled')
                               THEN coalesce(p_now, now()) ELSE finished_at END,
            updated_at = coalesce(p_now, now()),
            result = coalesce(p_result, result)
        WHERE id = ANY(p_ids) AND state = ANY(p_from)
        RETURNING *
    LOOP
        INSERT INTO job_event (job_id, level, message, created_at)
        VALUES (moved.id, p_level, p_message, coalesce(p_now, now()));
        PERFORM pg_notify('setu_job', setu_job_notice(moved));
        RETURN NEXT moved;
    END LOOP;
END;
$$;
