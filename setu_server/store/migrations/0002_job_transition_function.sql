-- 0002_job_transition_function: the one job transition path
-- (docs/jobs-and-tasks.md) as a SQL function, so statements that change a
-- task and its job (lease, complete) do both in one round trip and still
-- share one definition.
--
-- Moves every job of p_ids that is in one of the states p_from to p_to, bumps
-- its version, appends an event and notifies `setu_job` with
-- {job_id, version, state}. Returns the jobs that moved.

CREATE FUNCTION setu_transition_jobs(
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
        PERFORM pg_notify('setu_job', json_build_object(
            'job_id', moved.id, 'version', moved.version, 'state', moved.state)::text);
        RETURN NEXT moved;
    END LOOP;
END;
$$;
