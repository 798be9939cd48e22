-- 0009_job_notice_plpgsql: the same notice, built by plpgsql. As a sql
-- function with a FROM it could not be inlined, so every call planned its
-- query again: a third of each job transition's cost (lease, completion,
-- cancel). plpgsql keeps its expressions' plans for the session. The text
-- it returns is unchanged.
CREATE OR REPLACE FUNCTION setu_job_notice(j job) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    full_notice text := json_build_object(
        'job_id', j.id, 'version', j.version, 'state', j.state,
        'snapshot', json_build_object(
            'phase', j.phase, 'cancel_requested', j.cancel_requested,
            'error_message', j.error_message, 'rows_extracted', j.rows_extracted,
            'rows_loaded', j.rows_loaded, 'rows_total', j.rows_total,
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
