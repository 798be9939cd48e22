-- The schema as it stands after every migration, written out in one place
-- to be read. Servers never run this file: they apply migrations/ in order.
-- tests/integration/test_schema.py applies this file to one empty database
-- and the migrations to another and fails when the two catalogs differ, so
-- a new migration comes with its change here.
--
-- Not here: schema_migration, the migrator's own record (setu_server/store/migrate.py).
-- Timestamps are timestamptz; ids are uuids made by the server.

-- Tenants ------------------------------------------------------------------

CREATE TABLE workspace (
    id          uuid PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL
);

-- A client's credential. Only the SHA-256 of the key is kept: keys are
-- 256-bit random, so a fast hash is enough and lookups stay one index probe.
CREATE TABLE api_key (
    id            uuid PRIMARY KEY,
    workspace_id  uuid NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    name          text NOT NULL,
    prefix        text NOT NULL,
    token_hash    bytea NOT NULL UNIQUE,
    created_at    timestamptz NOT NULL,
    last_used_at  timestamptz,
    revoked_at    timestamptz
);
CREATE INDEX api_key_workspace_idx ON api_key (workspace_id);

-- An edge runtime. Online when active, not signed off, and seen (a parked
-- LeaseTask or any call) within the presence window (docs/jobs-and-tasks.md).
CREATE TABLE agent (
    id            uuid PRIMARY KEY,
    workspace_id  uuid NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    name          text NOT NULL,
    token_hash    bytea NOT NULL UNIQUE,
    active        boolean NOT NULL DEFAULT true,
    version       text NOT NULL DEFAULT '',
    capabilities  text[] NOT NULL DEFAULT '{}',
    hostname      text NOT NULL DEFAULT '',
    last_seen_at  timestamptz,
    created_at    timestamptz NOT NULL,
    -- Set by SignOff (a graceful stop), cleared by CheckIn.
    signed_off_at timestamptz
);
-- A name is unique among the active agents: a deactivated agent's name may
-- be taken again (migration 0014).
CREATE UNIQUE INDEX agent_active_name_key ON agent (workspace_id, name) WHERE active;

-- What data moves between ---------------------------------------------------

CREATE TABLE connection (
    id            uuid PRIMARY KEY,
    workspace_id  uuid NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    name          text NOT NULL,
    provider      text NOT NULL,
    -- Secret references stay references: {"$secret": "NAME"}.
    config        jsonb NOT NULL DEFAULT '{}',
    placement     text NOT NULL CHECK (placement IN ('cloud', 'agent')),
    agent_id      uuid REFERENCES agent (id),
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    UNIQUE (workspace_id, name),
    CHECK ((placement = 'agent') = (agent_id IS NOT NULL))
);

-- Discovered streams of a connection.
CREATE TABLE catalog_stream (
    connection_id  uuid NOT NULL REFERENCES connection (id) ON DELETE CASCADE,
    namespace      text NOT NULL DEFAULT '',
    name           text NOT NULL,
    columns        jsonb NOT NULL DEFAULT '[]',
    primary_key    text[] NOT NULL DEFAULT '{}',
    row_estimate   bigint NOT NULL DEFAULT 0,
    status         text NOT NULL CHECK (status IN ('active', 'changed', 'missing')),
    discovered_at  timestamptz NOT NULL,
    PRIMARY KEY (connection_id, namespace, name)
);

CREATE TABLE pipeline (
    id                         uuid PRIMARY KEY,
    workspace_id               uuid NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    name                       text NOT NULL,
    source_connection_id       uuid NOT NULL REFERENCES connection (id),
    destination_connection_id  uuid NOT NULL REFERENCES connection (id),
    streams                    text[] NOT NULL DEFAULT '{}',
    spec                       jsonb NOT NULL DEFAULT '{}',
    write_mode                 text NOT NULL
                               CHECK (write_mode IN ('append', 'overwrite', 'upsert', 'merge')),
    -- A cron expression; the scheduler fires the tick at next_run_at.
    schedule                   text,
    paused                     boolean NOT NULL DEFAULT false,
    next_run_at                timestamptz,
    created_at                 timestamptz NOT NULL,
    updated_at                 timestamptz NOT NULL,
    UNIQUE (workspace_id, name)
);
-- The scheduler's query: schedules whose tick has come.
CREATE INDEX pipeline_schedule_idx ON pipeline (next_run_at)
    WHERE schedule IS NOT NULL AND NOT paused;

-- Jobs: what clients submit and wait for ------------------------------------

CREATE TABLE job (
    id                uuid PRIMARY KEY,
    workspace_id      uuid NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    kind              text NOT NULL CHECK (kind IN ('run', 'test', 'discover', 'preview')),
    -- Written only by setu_transition_jobs and setu_transition_jobs_each, below.
    state             text NOT NULL
                      CHECK (state IN ('ready', 'pending', 'running',
                                       'succeeded', 'failed', 'cancelled')),
    -- Bumped by every change a watcher can see; notified with it.
    version           bigint NOT NULL DEFAULT 1,
    pipeline_id       uuid REFERENCES pipeline (id) ON DELETE SET NULL,
    connection_id     uuid REFERENCES connection (id) ON DELETE SET NULL,
    -- A run's snapshot of its pipeline, taken at submit.
    params            jsonb NOT NULL DEFAULT '{}',
    phase             text CHECK (phase IN ('extract', 'load', 'direct')),
    dry_run           boolean NOT NULL DEFAULT false,
    cancel_requested  boolean NOT NULL DEFAULT false,
    error_message     text NOT NULL DEFAULT '',
    rows_extracted    bigint NOT NULL DEFAULT 0,
    rows_loaded       bigint NOT NULL DEFAULT 0,
    rows_total        bigint NOT NULL DEFAULT 0,
    extract_runtime   text NOT NULL DEFAULT '',
    load_runtime      text NOT NULL DEFAULT '',
    result            jsonb,
    idempotency_key   text,
    scheduled_for     timestamptz,
    created_at        timestamptz NOT NULL,
    started_at        timestamptz,
    finished_at       timestamptz,
    updated_at        timestamptz NOT NULL,
    -- Set by the janitor once the run's staged data is deleted.
    staged_purged_at  timestamptz,
    -- What the loaded rows were, and the rows the operator chain dropped
    -- (extracted - loaded of each loaded stream): set with the run's counts.
    rows_filtered     bigint NOT NULL DEFAULT 0,
    rows_inserted     bigint NOT NULL DEFAULT 0,
    rows_updated      bigint NOT NULL DEFAULT 0,
    rows_unchanged    bigint NOT NULL DEFAULT 0,
    rows_deleted      bigint NOT NULL DEFAULT 0,
    -- Each stream's live counts while it moves: {stream: {"extracted": n, "loaded": n}}.
    stream_progress   jsonb NOT NULL DEFAULT '{}',
    UNIQUE (workspace_id, idempotency_key),
    -- A schedule tick creates one run, however many replicas fire it.
    UNIQUE (pipeline_id, scheduled_for)
);
CREATE INDEX job_workspace_created_idx ON job (workspace_id, created_at DESC, id DESC);
CREATE INDEX job_pipeline_idx ON job (pipeline_id, created_at DESC);
CREATE INDEX job_active_idx ON job (state) WHERE state IN ('pending', 'running');
-- The janitor's query: ended runs whose staged data is still there.
CREATE INDEX job_staged_purge_idx ON job (finished_at)
    WHERE kind = 'run' AND staged_purged_at IS NULL AND finished_at IS NOT NULL;

-- A job's timeline.
CREATE TABLE job_event (
    sequence    bigserial PRIMARY KEY,
    job_id      uuid NOT NULL REFERENCES job (id) ON DELETE CASCADE,
    level       text NOT NULL CHECK (level IN ('debug', 'info', 'warning', 'error')),
    stream      text NOT NULL DEFAULT '',
    message     text NOT NULL,
    created_at  timestamptz NOT NULL
);
CREATE INDEX job_event_job_idx ON job_event (job_id, sequence);

-- Per-stream counts of a run. A stream's load commits in the destination,
-- then sets loaded_at: a retry that resumes at load skips it.
CREATE TABLE job_output (
    job_id          uuid NOT NULL REFERENCES job (id) ON DELETE CASCADE,
    stream          text NOT NULL,
    rows_extracted  bigint NOT NULL DEFAULT 0,
    rows_loaded     bigint NOT NULL DEFAULT 0,
    checksum        text NOT NULL DEFAULT '',
    updated_at      timestamptz NOT NULL,
    loaded_at       timestamptz,
    -- What the load did to the destination's rows; null where it does not tell.
    rows_inserted   bigint,
    rows_updated    bigint,
    rows_unchanged  bigint,
    -- Rows a merge deleted (keys that left the source); null where none can be.
    rows_deleted    bigint,
    PRIMARY KEY (job_id, stream)
);

-- The saved cursor of each incremental stream (docs/pipelines.md); advanced
-- with the stream's committed load, deleted by a reset.
CREATE TABLE pipeline_stream_state (
    pipeline_id   uuid NOT NULL REFERENCES pipeline (id) ON DELETE CASCADE,
    stream        text NOT NULL,
    cursor_column text NOT NULL,
    cursor_type   text NOT NULL,
    cursor_value  text NOT NULL,
    rows          bigint NOT NULL DEFAULT 0,
    last_job_id   uuid REFERENCES job (id) ON DELETE SET NULL,
    updated_at    timestamptz NOT NULL,
    PRIMARY KEY (pipeline_id, stream)
);

-- Tasks: what runtimes lease ------------------------------------------------

CREATE TABLE task (
    id                uuid PRIMARY KEY,
    job_id            uuid NOT NULL REFERENCES job (id) ON DELETE CASCADE,
    workspace_id      uuid NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    kind              text NOT NULL
                      CHECK (kind IN ('migrate', 'extract', 'load', 'test', 'discover', 'preview')),
    state             text NOT NULL
                      CHECK (state IN ('pending', 'leased', 'succeeded', 'failed', 'cancelled')),
    -- 'cloud', or the agent's id as text: the queue a runtime leases from.
    runtime           text NOT NULL,
    agent_id          uuid REFERENCES agent (id),
    attempt           integer NOT NULL DEFAULT 1,
    max_attempts      integer NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    -- Not leasable before this (a retry's backoff).
    run_after         timestamptz NOT NULL,
    lease_token       uuid,
    lease_expires_at  timestamptz,
    payload           jsonb NOT NULL DEFAULT '{}',
    progress          jsonb NOT NULL DEFAULT '{}',
    result            jsonb,
    error_message     text NOT NULL DEFAULT '',
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    finished_at       timestamptz,
    -- Outages handed back without spending an attempt (ReleaseTask).
    free_retries      integer NOT NULL DEFAULT 0,
    CHECK ((runtime = 'cloud') = (agent_id IS NULL))
);
-- The lease query: oldest eligible pending task of one runtime.
CREATE INDEX task_pending_idx ON task (runtime, created_at) WHERE state = 'pending';
-- The reaper: leases that ran out.
CREATE INDEX task_lease_expiry_idx ON task (lease_expires_at) WHERE state = 'leased';
CREATE INDEX task_job_idx ON task (job_id);

-- What an extract staged for one stream of a run.
CREATE TABLE artifact (
    id           uuid PRIMARY KEY,
    job_id       uuid NOT NULL REFERENCES job (id) ON DELETE CASCADE,
    task_id      uuid REFERENCES task (id) ON DELETE SET NULL,
    stream       text NOT NULL,
    blob_prefix  text NOT NULL,
    parts        text[] NOT NULL DEFAULT '{}',
    rows         bigint NOT NULL DEFAULT 0,
    checksum     text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL,
    UNIQUE (job_id, stream)
);

-- Each part a staged extract stored whole, as it is stored: a retry resumes
-- after the ones it finds in blob as recorded.
CREATE TABLE run_part (
    job_id        uuid NOT NULL REFERENCES job (id) ON DELETE CASCADE,
    stream_index  integer NOT NULL,
    number        integer NOT NULL,
    stream        text NOT NULL,
    path          text NOT NULL,
    rows          bigint NOT NULL,
    bytes         bigint NOT NULL,
    sha256        text NOT NULL,
    position      text NOT NULL DEFAULT '',
    stored_at     timestamptz NOT NULL,
    PRIMARY KEY (job_id, stream_index, number)
);

-- The one job transition path -----------------------------------------------

-- The payload of a `setu_job` notification for one job row: {job_id,
-- version, state, snapshot: {what a transition or progress write changes}},
-- or, past 7,999 bytes, without the snapshot. plpgsql, not sql: a sql
-- function with a FROM is not inlined and plans its query on every call.
CREATE FUNCTION setu_job_notice(j job) RETURNS text
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

-- Moves every job of p_ids that is in one of the states p_from to p_to, bumps
-- its version, appends an event and notifies `setu_job` with its
-- setu_job_notice. Returns the jobs that moved. A function, so
-- statements that change a task and its job (lease, complete) do both in one
-- round trip and still share one definition.
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
        PERFORM pg_notify('setu_job', setu_job_notice(moved));
        RETURN NEXT moved;
    END LOOP;
END;
$$;

-- Moves each job of p_ids that is in one of the states p_from to p_to, like
-- setu_transition_jobs, but set-based: one UPDATE and one INSERT of events
-- for the whole batch, each job with its own event message (p_messages[i])
-- and result (p_results[i]; null keeps). Every moved job still bumps its
-- version and notifies `setu_job` with its setu_job_notice. A batch of
-- leases or completions moves its jobs with one call, not one per job.
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
