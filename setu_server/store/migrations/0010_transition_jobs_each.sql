-- 0010_transition_jobs_each: one job transition for a whole batch of jobs
-- (group commit's leases and merged completions), each job with its own
-- event message and result.
CREATE FUNCTION setu_transition_jobs_each(
    p_ids uuid[],
    p_messages text[],
    p_results jsonb[],
    p_to text,
    p_from text[],
    p_error text,
    p_phase text,
    p_level text,
    p_now timestamptz
) RETURNS SETOF job
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    moved job;
BEGIN
    FOR moved IN
        WITH asked AS (
            SELECT * FROM unnest(p_ids, p_messages, p_results) AS a(id, message, result)
        ), changed AS (
            UPDATE job
            SET state = p_to,
                version = job.version + 1,
                error_message = coalesce(p_error, job.error_message),
                phase = coalesce(p_phase, job.phase),
                started_at = CASE WHEN p_to = 'running'
                                  THEN coalesce(job.started_at, coalesce(p_now, now()))
                                  ELSE job.started_at END,
                finished_at = CASE WHEN p_to IN ('succeeded', 'failed', 'cancelled')
                                   THEN coalesce(p_now, now()) ELSE job.finished_at END,
                updated_at = coalesce(p_now, now()),
                result = coalesce(asked.result, job.result)
            FROM asked
            WHERE job.id = asked.id AND job.state = ANY(p_from)
            RETURNING job AS j, asked.message
        ), said AS (
            INSERT INTO job_event (job_id, level, message, created_at)
            SELECT (changed.j).id, p_level, changed.message, coalesce(p_now, now())
            FROM changed
        )
        SELECT (changed.j).* FROM changed
    LOOP
        PERFORM pg_notify('setu_job', setu_job_notice(moved));
        RETURN NEXT moved;
    END LOOP;
END;
$$;
