-- 0006_load_changes: what each stream's load did to the destination's rows
-- (inserted, updated, left unchanged); null where the destination does not tell.
ALTER TABLE job_output
    ADD COLUMN rows_inserted bigint,
    ADD COLUMN rows_updated bigint,
    ADD COLUMN rows_unchanged bigint;
