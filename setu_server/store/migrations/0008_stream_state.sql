-- 0008_stream_state: the saved cursor of each incremental stream of a
-- pipeline (docs/pipelines.md, "Incremental streams"). It advances in the
-- transaction that records the stream's load as committed, to the highest
-- cursor value that load carried; a failed, cancelled or dry run never
-- writes it. Deleting the row (a reset) makes the next run read in full.
CREATE TABLE pipeline_stream_state (
    pipeline_id   uuid NOT NULL REFERENCES pipeline (id) ON DELETE CASCADE,
    stream        text NOT NULL,
    -- The cursor column and its neutral type (setu_engine/values/types.py), and the
    -- highest value loaded, as text (ISO for times).
    cursor_column text NOT NULL,
    cursor_type   text NOT NULL,
    cursor_value  text NOT NULL,
    -- Rows loaded by the run that last advanced it.
    rows          bigint NOT NULL DEFAULT 0,
    last_job_id   uuid REFERENCES job (id) ON DELETE SET NULL,
    updated_at    timestamptz NOT NULL,
    PRIMARY KEY (pipeline_id, stream)
);
