-- 0012_run_part: each part a staged extract stored whole, recorded as it is
-- stored, so a retry or a hand-back resumes at the first part not stored
-- (after verifying the recorded ones in blob). Metadata only: no secret,
-- no row of data.
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
