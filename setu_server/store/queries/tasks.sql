-- Tasks change state only here; every statement that makes a task eligible
-- to lease notifies `setu_task` with its runtime, waking parked LeaseTasks.

-- name: count_leased_tasks
-- Tasks of a job that a runtime holds right now. $1 job_id
SELECT count(*) FROM task WHERE job_id = $1 AND state = 'leased';

-- name: count_unfinished_tasks
-- Tasks of a job still to run or running. $1 job_id
SELECT count(*) FROM task WHERE job_id = $1 AND state IN ('pending', 'leased');

-- name: mark_task_cancelled
-- A task that stopped because its job asked it to: cancelled, not failed.
-- $1 id
UPDATE task SET state = 'cancelled' WHERE id = $1 AND state = 'failed';

-- name: cancel_pending_tasks
-- $1 job_id, $2 now
UPDATE task SET state = 'cancelled', updated_at = coalesce($2, now()),
                finished_at = coalesce($2, now())
WHERE job_id = $1 AND state = 'pending';

-- name: mark_tasks_cancelled
-- mark_task_cancelled for a set of tasks, in one statement. $1 ids uuid[]
UPDATE task SET state = 'cancelled' WHERE id = ANY($1::uuid[]) AND state = 'failed';

-- name: cancel_pending_tasks_of_jobs
-- cancel_pending_tasks for a set of jobs (their runs ended at once: an agent
-- deactivated), in one statement. $1 job_ids uuid[], $2 now
UPDATE task SET state = 'cancelled', updated_at = coalesce($2, now()),
                finished_at = coalesce($2, now())
WHERE job_id = ANY($1::uuid[]) AND state = 'pending';

-- name: insert_task
-- $1 id, $2 job_id, $3 workspace_id, $4 kind, $5 runtime ('cloud' or an agent id),
-- $6 agent_id, $7 max_attempts, $8 payload, $9 now
WITH inserted AS (
    INSERT INTO task (id, job_id, workspace_id, kind, state, runtime, agent_id, max_attempts,
                      run_after, payload, created_at, updated_at)
    VALUES ($1, $2, $3, $4, 'pending', $5, $6, $7, coalesce($9, now()), $8,
            coalesce($9, now()), coalesce($9, now()))
    RETURNING *
)
SELECT inserted.*, pg_notify('setu_task', runtime) AS notified FROM inserted;

-- name: lease_tasks
-- Up to cardinality($2) of the oldest eligible pending tasks of one runtime,
-- leased (the n-th with the n-th token of $2), and each job that was
-- pending moved to running, in one statement. A job already running is left
-- alone: no event, no version bump, no notification (a job is transitioned
-- when its state changes, not at every task event).
-- SKIP LOCKED: concurrent lessees on any server never take the same row.
-- Locks go job before task everywhere (CancelJob, a failure ending its run,
-- a last load): the lessee takes the job's lock with the task's and waits
-- for neither, so it never holds a task while waiting on its job (the
-- deadlock with CancelJob). A task whose job is busy is passed over; when
-- work is left after a lease, `setu_task` wakes the runtime's other lessees
-- (once per statement).
-- Returns the tasks' columns, oldest first, and `moved_job`, the job row if
-- this statement moved it.
-- $1 runtime, $2 lease tokens uuid[], $3 lease seconds, $4 now
WITH candidates AS (
    SELECT task.id, task.created_at FROM task JOIN job ON job.id = task.job_id
    WHERE task.runtime = $1 AND task.state = 'pending'
      AND task.run_after <= coalesce($4, now())
    ORDER BY task.created_at
    LIMIT cardinality($2::uuid[])
    FOR NO KEY UPDATE OF task, job SKIP LOCKED
), picked AS (
    SELECT id, ($2::uuid[])[row_number() OVER (ORDER BY created_at, id)] AS token
    FROM candidates
), leased AS (
    UPDATE task
    SET state = 'leased',
        lease_token = picked.token,
        lease_expires_at = coalesce($4, now()) + make_interval(secs => $3),
        updated_at = coalesce($4, now())
    FROM picked
    WHERE task.id = picked.id
    RETURNING task.*
), said AS (
    SELECT DISTINCT ON (job_id) job_id,
           format('Task %s leased by %s (attempt %s of %s)', kind,
                  CASE WHEN runtime = 'cloud' THEN 'cloud' ELSE 'agent:' || runtime END,
                  attempt, max_attempts) AS message
    FROM leased
    ORDER BY job_id, created_at
), moved AS (
    -- One set-based transition for every job of the batch (migration 0010).
    SELECT j FROM setu_transition_jobs_each(
        ARRAY(SELECT job_id FROM said ORDER BY job_id),
        ARRAY(SELECT message FROM said ORDER BY job_id),
        NULL, 'running', ARRAY['pending'], NULL, NULL, 'info', $4) AS j
), more AS (
    SELECT pg_notify('setu_task', $1) AS notified
    WHERE EXISTS (SELECT 1 FROM leased) AND EXISTS (
        SELECT 1 FROM task
        WHERE runtime = $1 AND state = 'pending' AND run_after <= coalesce($4, now())
          AND id NOT IN (SELECT id FROM leased)
    )
)
SELECT leased.*, moved.j AS moved_job, (SELECT notified FROM more) AS notified
FROM leased LEFT JOIN moved ON (moved.j).id = leased.job_id
ORDER BY leased.created_at, leased.id;

-- name: seconds_to_next_eligible
-- Seconds until the next delayed task of a runtime becomes eligible (null:
-- none is waiting). $1 runtime, $2 now
SELECT extract(epoch FROM min(run_after) - coalesce($2, now()))::float8 FROM task
WHERE runtime = $1 AND state = 'pending' AND run_after > coalesce($2, now());

-- name: heartbeat_task
-- Extends a live lease; answers whether its job asked to cancel. An edge
-- stage's progress (rows_read of an extract, rows_written of a load) becomes
-- its run's counts, its streams' counts merge into the run's
-- stream_progress, and a run with no phase yet takes the stage's (extract
-- or load: its first beat comes as the stage starts), with a version bump
-- and a notify, so WatchJob shows it. Only the run's own streams merge: a
-- load's one stream (its payload's), else the streams the run took at
-- submit (job.params), or their qualified spellings (namespace.name) while
-- the record holds fewer than 1000 names, as a run of every stream the
-- source offers takes any. Other names are ignored, so an agent cannot
-- grow its run's record without bound.
-- Only the runtime holding the lease may present its token.
-- $1 id, $2 lease_token, $3 lease seconds, $4 progress, $5 now, $6 runtime
WITH beat AS (
    UPDATE task
    SET lease_expires_at = coalesce($5, now()) + make_interval(secs => $3),
        progress = coalesce($4, progress),
        updated_at = coalesce($5, now())
    FROM job
    WHERE task.id = $1 AND task.lease_token = $2 AND task.runtime = $6
      AND task.state = 'leased' AND task.lease_expires_at > coalesce($5, now())
      AND job.id = task.job_id
    RETURNING task.job_id, task.kind, task.payload, task.lease_expires_at, job.cancel_requested
), counted AS (
    UPDATE job
    SET rows_extracted = CASE WHEN beat.kind = 'extract' AND $4::jsonb ? 'rows_read'
                              THEN ($4::jsonb ->> 'rows_read')::bigint ELSE rows_extracted END,
        -- A load task moves one stream: add the streams already loaded.
        rows_loaded = CASE WHEN beat.kind = 'load' AND $4::jsonb ? 'rows_written'
                           THEN ($4::jsonb ->> 'rows_written')::bigint
                                + (SELECT coalesce(sum(o.rows_loaded), 0) FROM job_output o
                                   WHERE o.job_id = beat.job_id AND o.loaded_at IS NOT NULL)
                           ELSE rows_loaded END,
        phase = coalesce(job.phase, beat.kind),
        -- An extract's estimate, while the run has no total of its own.
        rows_total = CASE WHEN job.rows_total = 0 AND beat.kind = 'extract'
                          THEN coalesce(($4::jsonb ->> 'rows_total')::bigint, 0)
                          ELSE job.rows_total END,
        stream_progress = job.stream_progress || coalesce(
            (SELECT jsonb_object_agg(s ->> 'stream', jsonb_build_object(
                        'extracted', coalesce((s ->> 'rows_extracted')::bigint, 0),
                        'loaded', coalesce((s ->> 'rows_loaded')::bigint, 0)))
             FROM jsonb_array_elements(coalesce($4::jsonb -> 'streams', '[]'::jsonb)) AS s
             WHERE CASE
                 WHEN beat.kind = 'load' AND beat.payload ? 'stream'
                     THEN s ->> 'stream' = beat.payload ->> 'stream'
                 WHEN job.params #> '{pipeline,streams}' ? (s ->> 'stream')
                      OR job.stream_progress ? (s ->> 'stream')
                     THEN true
                 -- A runtime names a stream qualified (public.orders for a
                 -- pipeline's orders); a run of every stream has no list.
                 ELSE (SELECT count(*) FROM jsonb_object_keys(job.stream_progress)) < 1000
                      AND (jsonb_array_length(coalesce(job.params #> '{pipeline,streams}', '[]')) = 0
                           OR EXISTS (
                               SELECT 1
                               FROM jsonb_array_elements_text(job.params #> '{pipeline,streams}') AS w (name)
                               WHERE right(s ->> 'stream', length(w.name) + 1) = '.' || w.name))
             END),
            '{}'::jsonb),
        version = job.version + 1,
        updated_at = coalesce($5, now())
    FROM beat
    WHERE job.id = beat.job_id AND job.state = 'running' AND beat.kind IN ('extract', 'load')
      AND (job.phase IS NULL
           OR (beat.kind = 'extract' AND $4::jsonb ? 'rows_read')
           OR (beat.kind = 'load' AND $4::jsonb ? 'rows_written'))
    RETURNING pg_notify('setu_job', setu_job_notice(job)) AS notified
)
SELECT beat.lease_expires_at, beat.cancel_requested, (SELECT count(*) FROM counted) AS counted
FROM beat;

-- name: complete_task
-- $1 id, $2 lease_token, $3 result, $4 now, $5 runtime (the lease's holder)
UPDATE task
SET state = 'succeeded', result = $3, finished_at = coalesce($4, now()),
    updated_at = coalesce($4, now())
WHERE id = $1 AND lease_token = $2 AND runtime = $5 AND state = 'leased'
  AND lease_expires_at > coalesce($4, now())
RETURNING *;

-- name: complete_task_and_job
-- A task whose success ends its job: both in one statement, and only when
-- the task is of the kind its result says (none said: only kinds whose
-- success ends their job). Returns the task's columns and `moved_job`.
-- $1 id, $2 lease_token, $3 result, $4 now, $5 kind, $6 runtime (the lease's holder)
WITH done AS (
    UPDATE task
    SET state = 'succeeded', result = $3, finished_at = coalesce($4, now()),
        updated_at = coalesce($4, now())
    WHERE id = $1 AND lease_token = $2 AND runtime = $6 AND state = 'leased'
      AND lease_expires_at > coalesce($4, now())
      AND (kind = $5::text OR ($5::text IS NULL AND kind IN ('test', 'preview')))
    RETURNING *
), moved AS (
    SELECT j FROM done,
         setu_transition_jobs(
             -- '': a cancel requested too late to stop it leaves no error behind.
             ARRAY[done.job_id], 'succeeded', ARRAY['running'], '', NULL, 'info',
             format('Task %s succeeded on %s', kind,
                    CASE WHEN runtime = 'cloud' THEN 'cloud' ELSE 'agent:' || runtime END),
             $4, $3) AS j
)
SELECT done.*, (SELECT j FROM moved) AS moved_job FROM done;

-- name: complete_tasks_and_jobs
-- Several completions of complete_task_and_job in one statement (a group
-- commit's batch): the n-th task of $1 with the n-th token, result, kind
-- and runtime, each under the same conditions as alone; their jobs move with
-- one set-based transition (migration 0010). A completion whose conditions
-- fail is left out (its caller finds out why on its own). Returns the
-- completed tasks' columns and `moved_job`.
-- $1 ids uuid[], $2 lease tokens uuid[], $3 results jsonb[], $4 kinds text[],
-- $5 runtimes text[], $6 now
WITH asked AS (
    SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::jsonb[], $4::text[], $5::text[])
        AS a(id, token, result, kind, runtime)
), done AS (
    UPDATE task
    SET state = 'succeeded', result = asked.result, finished_at = coalesce($6, now()),
        updated_at = coalesce($6, now())
    FROM asked
    WHERE task.id = asked.id AND task.lease_token = asked.token
      AND task.runtime = asked.runtime AND task.state = 'leased'
      AND task.lease_expires_at > coalesce($6, now())
      AND (task.kind = asked.kind OR (asked.kind IS NULL AND task.kind IN ('test', 'preview')))
    RETURNING task.*
), moved AS (
    SELECT j FROM setu_transition_jobs_each(
        ARRAY(SELECT job_id FROM done ORDER BY job_id, id),
        ARRAY(SELECT format('Task %s succeeded on %s', kind,
                            CASE WHEN runtime = 'cloud' THEN 'cloud' ELSE 'agent:' || runtime END)
              FROM done ORDER BY job_id, id),
        ARRAY(SELECT result FROM done ORDER BY job_id, id),
        -- '': a cancel requested too late to stop it leaves no error behind.
        'succeeded', ARRAY['running'], '', NULL, 'info', $6) AS j
)
SELECT done.*, moved.j AS moved_job
FROM done LEFT JOIN moved ON (moved.j).id = done.job_id;

-- name: fail_task
-- Retry (back to pending, attempt + 1, after a backoff of $4 seconds
-- doubling per attempt, capped at $7) while $5 and attempts remain and the
-- job neither asked to stop nor ended; otherwise failed.
-- $1 id, $2 lease_token, $3 error, $4 backoff seconds, $5 retryable,
-- $6 now, $7 max backoff seconds, $8 runtime (the lease's holder)
WITH failed AS (
    UPDATE task
    SET state = CASE WHEN retry.again THEN 'pending' ELSE 'failed' END,
        attempt = CASE WHEN retry.again THEN attempt + 1 ELSE attempt END,
        run_after = coalesce($6, now()) + make_interval(
            secs => least($7, $4 * power(2, attempt - 1))),
        error_message = $3,
        lease_expires_at = NULL,
        finished_at = CASE WHEN retry.again THEN NULL ELSE coalesce($6, now()) END,
        updated_at = coalesce($6, now())
    FROM (
        SELECT $5 AND t.attempt < t.max_attempts AND NOT j.cancel_requested
               AND j.state NOT IN ('succeeded', 'failed', 'cancelled') AS again
        FROM task t JOIN job j ON j.id = t.job_id
        WHERE t.id = $1
    ) AS retry
    WHERE id = $1 AND lease_token = $2 AND runtime = $8 AND state = 'leased'
      AND lease_expires_at > coalesce($6, now())
    RETURNING task.*
)
SELECT failed.*,
       CASE WHEN state = 'pending' THEN pg_notify('setu_task', runtime) END AS notified
FROM failed;

-- name: get_task
-- $1 id
SELECT * FROM task WHERE id = $1;

-- name: get_agent_task
-- A task of one agent's queue: another runtime's task is not found. $1 id, $2 runtime
SELECT * FROM task WHERE id = $1 AND runtime = $2;

-- name: reap_expired_leases
-- Leases that ran out: back to pending (attempt + 1, after a backoff of $2
-- seconds doubling per attempt, capped at $3), or failed when attempts are
-- spent or the job asked to stop (nothing runs a cancelled run again).
-- The token is cleared with the lease: a late report from the runtime that
-- let it lapse is refused as lease lost, not mistaken for a repeat of its own.
-- $1 batch size, $2 backoff seconds, $3 max backoff seconds, $4 now
WITH expired AS (
    SELECT task.id, task.attempt < task.max_attempts AND NOT job.cancel_requested AS again
    FROM task JOIN job ON job.id = task.job_id
    WHERE task.state = 'leased' AND task.lease_expires_at <= coalesce($4, now())
    ORDER BY task.lease_expires_at
    LIMIT $1
    FOR UPDATE OF task SKIP LOCKED
), reaped AS (
    UPDATE task
    SET state = CASE WHEN expired.again THEN 'pending' ELSE 'failed' END,
        attempt = CASE WHEN expired.again THEN attempt + 1 ELSE attempt END,
        run_after = coalesce($4, now()) + make_interval(
            secs => least($3, $2 * power(2, attempt - 1))),
        error_message = 'lease expired: the runtime stopped heartbeating',
        lease_token = NULL,
        lease_expires_at = NULL,
        finished_at = CASE WHEN expired.again THEN NULL ELSE coalesce($4, now()) END,
        updated_at = coalesce($4, now())
    FROM expired
    WHERE task.id = expired.id
    RETURNING task.*
)
SELECT reaped.*,
       CASE WHEN state = 'pending' THEN pg_notify('setu_task', runtime) END AS notified
FROM reaped;

-- name: fail_agent_tasks
-- Every pending or leased task of a runtime, failed at once (its agent was
-- deactivated). Only what their jobs' outcome reads comes back: thousands
-- of rows, whose payloads nobody reads. $1 runtime, $2 error, $3 now
UPDATE task
SET state = 'failed', error_message = $2, lease_expires_at = NULL,
    finished_at = coalesce($3, now()), updated_at = coalesce($3, now())
WHERE runtime = $1 AND state IN ('pending', 'leased')
RETURNING id, job_id, kind, runtime, error_message;

-- name: release_task
-- A leased task handed back without spending an attempt (ReleaseTask): its
-- runtime is stopping (a drain: eligible again at once), or a database it
-- works on went away for a moment (an outage, $6: eligible after $5 seconds
-- doubling per free retry, capped at $7, and counted in free_retries). Its
-- lease is cleared, token too, so a late report with it is refused. Only
-- while the job neither asked to stop nor ended and, for an outage, fewer
-- than $8 free retries are spent; otherwise nothing changes (the caller
-- records a failure instead, or finds the lease lost).
-- $1 id, $2 lease_token, $3 runtime (the lease's holder), $4 now,
-- $5 outage backoff seconds, $6 outage, $7 max backoff seconds,
-- $8 free retries allowed, $9 message
WITH released AS (
    UPDATE task
    SET state = 'pending',
        run_after = coalesce($4, now()) + CASE WHEN $6
            THEN make_interval(secs => least($7, $5 * power(2, task.free_retries)))
            ELSE interval '0' END,
        lease_token = NULL,
        lease_expires_at = NULL,
        free_retries = task.free_retries + CASE WHEN $6 THEN 1 ELSE 0 END,
        error_message = $9,
        updated_at = coalesce($4, now())
    FROM job
    WHERE task.id = $1 AND task.lease_token = $2 AND task.runtime = $3
      AND task.state = 'leased' AND task.lease_expires_at > coalesce($4, now())
      AND job.id = task.job_id AND NOT job.cancel_requested
      AND job.state NOT IN ('succeeded', 'failed', 'cancelled')
      AND (NOT $6 OR task.free_retries < $8)
    RETURNING task.*
)
SELECT released.*, pg_notify('setu_task', released.runtime) AS notified FROM released;
