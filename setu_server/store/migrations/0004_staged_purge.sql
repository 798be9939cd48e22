-- 0004_staged_purge: staged data is deleted some time after its run ended.
ALTER TABLE job ADD COLUMN staged_purged_at timestamptz;
-- The janitor's query: ended runs whose staged data is still there.
CREATE INDEX job_staged_purge_idx ON job (finished_at)
    WHERE kind = 'run' AND staged_purged_at IS NULL AND finished_at IS NOT NULL;
