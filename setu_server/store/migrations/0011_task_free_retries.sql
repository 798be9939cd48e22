-- 0011_task_free_retries: outages a task was handed back for without
-- spending an attempt (ReleaseTask, RELEASE_REASON_OUTAGE), bounded by the
-- server's outage_free_retries.
ALTER TABLE task ADD COLUMN free_retries integer NOT NULL DEFAULT 0;
